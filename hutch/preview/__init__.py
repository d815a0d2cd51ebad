"""Preview URLs: a port of a box, published, reached from a browser through the preview proxy."""
