"""(scaffold) JSON API routes of this part of the tasks app, mounted by facet_site/api.py."""
from ninja import Router

router = Router(tags=["tasks"])
