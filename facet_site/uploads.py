"""Uploads that cannot fill the disk: a file upload handler that stops reading a request body once
an uploaded file passes FACET_UPLOAD_MAX_BYTES, and the middleware that turns that into a 413
with a message naming the file and the limit (docs/operations.md).

Django checks nothing while it streams a multipart body to a temporary file; the forms checked
`uploaded.size` only after the whole body was on disk. Here the body is parsed by the middleware,
before any view or CSRF check reads it, so every upload route is covered; a body whose
Content-Length is already over the limit is refused before a byte of it is read. The temporary
file goes under the data directory (FILE_UPLOAD_TEMP_DIR) and is deleted when the upload stops;
a starting worker removes the ones a killed web process left (skills.services.remove_leftovers).
"""
from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import MemoryFileUploadHandler, TemporaryFileUploadHandler
from django.http import HttpResponse, JsonResponse

# multipart boundaries, headers and the other form fields around the file
FORM_OVERHEAD_BYTES = 1024 * 1024


class UploadTooLarge(Exception):
    """The upload passed the limit; the message says which file and what the limit is."""


def _limit() -> int:
    return settings.FACET_UPLOAD_MAX_BYTES


class _Limited:
    """Counts each uploaded file's bytes and stops the upload (without reading the rest of the
    body) the moment one passes the limit."""

    def new_file(self, field_name, file_name, *args, **kwargs):
        self.received = 0  # first: the memory handler's new_file ends by raising StopFutureHandlers
        super().new_file(field_name, file_name, *args, **kwargs)

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > _limit():
            if getattr(self, "file", None) is not None:
                self.file.close()  # a NamedTemporaryFile: closing it deletes it
            raise UploadTooLarge(f"{self.field_name}: {self.file_name} is over the upload limit of "
                                 f"{_limit():,} bytes; the upload was stopped")
        return super().receive_data_chunk(raw_data, start)


class LimitedMemoryUploadHandler(_Limited, MemoryFileUploadHandler):
    """Small bodies (FILE_UPLOAD_MAX_MEMORY_SIZE) stay in memory, within the limit too."""


class LimitedUploadHandler(_Limited, TemporaryFileUploadHandler):
    """Bigger ones go to a temporary file under the data directory, within the limit."""


def _refuse(request, message: str) -> HttpResponse:
    if request.path_info.startswith("/api/"):
        return JsonResponse({"detail": message}, status=413)
    return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")


class UploadLimitMiddleware:
    """Parses multipart bodies under the limit before anything else reads them (see the module)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method == "POST" and request.content_type == "multipart/form-data":
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > _limit() + FORM_OVERHEAD_BYTES:
                return _refuse(request, f"The request body of {length:,} bytes is over the upload limit of "
                                        f"{_limit():,} bytes; nothing was read.")
            try:
                request.FILES  # noqa: B018  (parses the body now, through LimitedUploadHandler)
            except UploadTooLarge as exc:
                return _refuse(request, str(exc))
        return self.get_response(request)
