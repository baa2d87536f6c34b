"""The page-number pagination every list in the JSON API uses: django-ninja's, with page numbers
and sizes bounded, so `?page=<a number past 64 bits>` is a 422 naming the parameter instead of an
OFFSET the database cannot hold."""
from typing import Optional

from ninja import Field, Schema
from ninja.pagination import PageNumberPagination as NinjaPageNumberPagination

# 10**9 pages of 50 rows is far past any table here and far inside a 64-bit OFFSET.
MAX_PAGE = 10**9


class PageNumberPagination(NinjaPageNumberPagination):
    class Input(Schema):
        page: int = Field(1, ge=1, le=MAX_PAGE)
        page_size: Optional[int] = Field(None, ge=1, le=1000)
