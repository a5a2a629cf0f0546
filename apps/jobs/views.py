from django.http import HttpResponse


def job_list(request):
    return HttpResponse("jobs")


def job_create(request):
    return HttpResponse("create")


def job_detail(request, job_id):
    return HttpResponse("detail")


def job_stop_view(request, job_id):
    return HttpResponse("stop")
