"""A folder of markdown on disk, as the import and export commands see it.

`mark import`, `mark export`, `mark okf ...` and `mark-server import` must agree on which files
a folder offers and why the others are left out, so that rule lives here once, shared by client
and server as `durable` is: `source` walks a folder, `plan` decides the writes an import makes
and reports them, `okf` checks a folder against the Open Knowledge Format.
"""
