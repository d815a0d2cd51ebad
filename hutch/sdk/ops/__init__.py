"""Every SDK call, written once as a flow: the request it makes and how its answer is read.

One module per resource: `sandboxes` (lifecycle, logs, secret bindings, and the data plane's
access), `previews`, `commands` (run, and spawned processes), `files` (files and the filesystem),
`code` (the code interpreter's run_code and contexts), `templates` (and their builds), `secrets`
(and providers).
"""
