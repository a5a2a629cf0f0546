"""What the jobs app announces, for the apps above it to act on without it importing them."""

from django.dispatch import Signal

# Pods were created for a job that pays by the minute (public or spot), sent with `pod_ids`
# and `new` (True when they were inserted just now, so none can have a meter yet). Billing
# opens their meters, in the sender's transaction (apps/billing/apps.py).
paid_pods_created = Signal()
