"""The prefix of the metadata keys that belong to lazystore itself.

Keys with this prefix (the nested structure of a training checkpoint, a
delta's base, tied names, the framework a state came from) are lazystore's;
users cannot set them (docs/format.md §11.6). It lives here, below the
format's modules, because the shared tools that name such keys
(``frameworks``, ``ties``) come before the format in the pipeline.
"""

RESERVED_METADATA_PREFIX = "__lazystore"
