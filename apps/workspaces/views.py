from django.http import HttpResponse


def workspace_switch(request):
    return HttpResponse("switch")


def access_key_list(request):
    return HttpResponse("access keys")
