"""storage.fs: the one place that turns URLs into (fsspec filesystem, path) and does file I/O on them.

Stores take URLs (plain local paths, ``file://`` or ``s3://`` URLs) and call the functions of
these modules; nothing else in the package looks at paths or calls ``os``. Each module owns one thing:

- :mod:`storage.fs.urls`: URL -> (filesystem, path), S3 client options, error translation;
- :mod:`storage.fs.uploads`: putting a complete local file on an object store and verifying it;
- :mod:`storage.fs.atomic`: atomic, durable writes (``local_write``, ``write_text_atomic``,
  ``create_exclusive``);
- :mod:`storage.fs.reads`: existence checks, listings and reads (``local_read_path`` through the
  read cache of :mod:`storage.read_cache`);
- :mod:`storage.fs.identity`: a file's stable identity (place under a root, size, content digest
  or ETag), how records recognise a file after its directory moves;
- :mod:`storage.fs.changes`: creating directories, deleting, copying and moving files.

The package re-exports nothing: import the module you use (``from storage.fs import reads``).
Layers inside it, highest first (import-linter holds them): changes -> atomic | reads | identity -> uploads -> urls.

S3 listings are never cached (``use_listings_cache=False``): a resumed run, another process
or another store object must see objects written since, and a stale listing could hide a
checkpoint version. Listings are small and rare next to data transfers, so it costs little;
filesystem *instances* stay cached (fsspec's default) because building one creates an HTTP
session and resolves credentials.
"""
