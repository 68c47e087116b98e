"""One module per sub-command beyond resolve/guards; each defines a click command."""
