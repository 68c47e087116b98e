"""Stage 4 — the deployment as given, read and checked: the device and environment (``device``,
``profiles``, ``pins``), the release's flags and a launch command or config YAML (``flags``,
``launch``, ``yamlconfig``), the model checkpoint (``modeldir``, ``checkpoint``, ``hfhub``)."""
