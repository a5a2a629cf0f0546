from django.http import HttpResponse


def job_list(request):
    return HttpResponse("jobs")
