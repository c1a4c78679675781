"""The tools' parameter types, shared by every tool group.

The SDK builds each tool's input schema from its signature, evaluating the annotations in the
module that defines the tool, so these are module-level names the groups import. Descriptions are
short on purpose: the whole ``tools/list`` is read by the agent on every session.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from markproto.protocol.limits import LIST_PAGE_MAX, LOOKUP_MAX

MAX_BUDGET = 10_000
"""Tokens: a budgeted result stays within one result's 40,000 characters."""

Url = Annotated[str, Field(description="mark://host/path, or /path on the -host server")]
Force = Annotated[bool, Field(description="whole body even over 8 KB")]
Verbose = Annotated[bool, Field(description="all metadata in the envelope")]
Offset = Annotated[int, Field(ge=0, description="continue a truncated result")]
Body = Annotated[str, Field(description="markdown")]
Metadata = Annotated[
    dict[str, str] | None,
    Field(
        description="string values; replaces the metadata (left out: the current one is kept). "
        "tags: comma list; importance: 0-1; type; title; rel-<predicate>: /path"
    ),
]
PageSize = Annotated[int | None, Field(ge=1, le=LIST_PAGE_MAX)]
Scope = Annotated[str, Field(description="scope: / or a folder")]
Query = Annotated[str, Field(description="2+ characters; * matches all")]
Filter = Annotated[str | None, Field(description="tag=x,modified-after=2025-01-01,key=value")]
Limit = Annotated[int | None, Field(ge=1, le=LOOKUP_MAX, description="default 10")]
Match = Literal["catalog", "body"] | None
Budget = Annotated[
    int | None,
    Field(
        ge=1,
        le=MAX_BUDGET,
        description="approximate tokens for the whole result: matched sections follow the table",
    ),
]
