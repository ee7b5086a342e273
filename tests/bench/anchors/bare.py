"""The anchors: bare functions-framework functions doing nothing of their own."""

import functions_framework


@functions_framework.http
def hello(request):  # type: ignore[no-untyped-def]
    return "hello"


@functions_framework.http
def echo(request):  # type: ignore[no-untyped-def]
    return request.get_data(), 200, {"Content-Type": request.content_type or "text/plain"}
