"""Commands that act on a serve from outside it (`stop`, `rescue`); only cli.py imports them."""
