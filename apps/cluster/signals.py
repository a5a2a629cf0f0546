"""What the cluster app announces, for the apps above it to act on without it importing them."""

from django.dispatch import Signal

# An instance type's original price changed (or was first recorded: `old` is None), sent
# with `instance_type_id`, `old`, `new` (Decimal CNY per instance-hour) and `at` (when the
# new price took effect), in the saver's transaction. The market moves the type's market
# price with it (apps/market/apps.py).
original_price_changed = Signal()
