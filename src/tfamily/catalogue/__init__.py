"""What the library offers, described: the reading tour, the extension-points page and
``tfamily members``."""
