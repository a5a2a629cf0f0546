from django.http import HttpResponse


def quota_tree(request):
    return HttpResponse("quotas")
