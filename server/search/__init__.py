"""Search: the text rules, the catalog, per-document analysis, the body index, and the LOOKUP
service over them."""
