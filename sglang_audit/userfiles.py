"""Files the user gives the tool (deployments, rule dirs, --location, config.json, a
pyproject): read only if regular, with a size cap; YAML with bounded aliases. Any stage may
read a user file, so this is a base module beside errors.py."""

from __future__ import annotations

# ---- user files: regular files only, size-capped, YAML aliases bounded -----------------
MAX_USER_FILE = 16 * 1024 * 1024  # a deployment, rule, launch script or config.json
MAX_YAML_ALIASES = 100  # the shipped rules and real deployment files use none


class UserFileError(Exception):
    """A user file that is not read: ``message`` says why (one line, names the file)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def read_user_file(path: object, what: str, max_bytes: int = MAX_USER_FILE) -> bytes:
    """The bytes of a user-given file, if it is a regular file within ``max_bytes``: a FIFO
    (`--location <(...)`), a device (`/dev/zero`) or a huge file is refused, never read."""
    import os
    import stat

    try:
        # O_NONBLOCK: opening a FIFO with no writer must not block before the type check
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # type: ignore[call-overload]
    except OSError as exc:
        raise UserFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserFileError(f"{what} {path}: not a regular file (a FIFO, device or directory is not read)")
        if st.st_size > max_bytes:
            raise UserFileError(f"{what} {path}: larger than {max_bytes // (1024 * 1024)} MB, not read")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > max_bytes:  # grew while being read
                raise UserFileError(f"{what} {path}: larger than {max_bytes // (1024 * 1024)} MB, not read")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UserFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def safe_yaml_load(text: str) -> object:
    """``yaml.safe_load`` with at most MAX_YAML_ALIASES aliases: a 1 KB "billion laughs"
    document expands to gigabytes in whatever walks it afterwards."""
    import yaml

    if "&" not in text and getattr(yaml, "__with_libyaml__", False):
        # no anchor, so no alias can expand: libyaml's parser (10x faster: the 62 shipped rules
        # load in 0.03 s instead of 0.26 s, which every check/explain/report paid). A document
        # it refuses is read again below, so the error a user sees is the same either way.
        try:
            return yaml.load(text, Loader=yaml.CSafeLoader)  # noqa: S506 - the safe constructor
        except yaml.YAMLError:
            pass

    class _Loader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: object, index: object) -> object:  # type: ignore[override]
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise yaml.YAMLError(f"more than {MAX_YAML_ALIASES} aliases (*name): not read")
            return super().compose_node(parent, index)  # type: ignore[arg-type]

    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    if loader.aliases and _expanded_size(data, MAX_YAML_NODES) > MAX_YAML_NODES:
        raise yaml.YAMLError(f"aliases expand to more than {MAX_YAML_NODES} values (a YAML bomb?): not read")
    return data


MAX_YAML_NODES = 100_000


def _expanded_size(value: object, limit: int) -> int:
    """Values a full walk visits, shared parts counted at each use (memoised per object)."""
    memo: dict[int, int] = {}

    def size(v: object, depth: int) -> int:
        if not isinstance(v, (list, dict)) or depth > 100:
            return 1
        key = id(v)
        if key in memo:
            return memo[key]
        memo[key] = 1  # a self-reference counts once
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else v
        total = 1
        for item in items:
            total += size(item, depth + 1)
            if total > limit:
                break
        memo[key] = min(total, limit + 1)
        return memo[key]

    return size(value, 0)
