"""Options and helpers shared by every command (kept apart so command modules can use
them without importing the command group)."""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from sglang_audit.errors import AuditError
from sglang_audit.inputs.device import ARCH_CHOICES, DEFAULT_CUDA
from sglang_audit.resolve.pipeline import Request, bundled_profiles

EXIT_CODES = """\b
Exit codes:
  0  resolved (every setting known, configuration accepted)
  1  SGLang would reject this configuration (an assert/raise fires), or a
     setting is unsupported (the layers built with it fail)
  2  usage or input error (bad --arch, missing source, bad config.json, ...)
  3  resolution incomplete: some setting is unknown (see its reason), or the
     release's ModelConfig could not be read for the model
"""


def progress(msg: str) -> None:
    """Progress for a person watching: on a terminal only (piped output stays clean)."""
    if _stderr_is_tty():
        STATUS.clear()
        click.echo(msg, err=True)


class StatusLine:
    """One stderr line rewritten in place (a terminal only), e.g. the count of files parsed.

    The carriage return and erase-line are the tool's own terminal control and reach the
    terminal as they are (``write_control``); the text may quote the checkout (a file name)
    and is escaped."""

    def __init__(self) -> None:
        self.shown = False

    def show(self, text: str) -> None:
        if not _stderr_is_tty():
            return
        import shutil

        cols = max(20, shutil.get_terminal_size().columns)
        write_control(sys.stderr, "\r\x1b[K", escape_unsafe(text)[: cols - 1])
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            write_control(sys.stderr, "\r\x1b[K")
            self.shown = False


STATUS = StatusLine()


def parse_progress() -> Any:
    """An ``on_parse`` hook for SourceCache: "parsing the release: N files (path)" on a
    terminal, the path inside its package (``sglang/srt/...``, ``flashinfer/gemm/...``),
    never the cache directory it was extracted into."""
    count = [0]

    def on_parse(path: Any) -> None:
        count[0] += 1
        STATUS.show(f"parsing the release (first run only): {count[0]} files, {package_path(path)}")

    return on_parse


_TOP_PACKAGES = ("sglang", "flashinfer")  # the packages the tool parses


def package_path(path: Any) -> str:
    """``path`` inside the package it belongs to: an extracted wheel or sdist without the
    cache directory it was extracted into (``<cache>/sources/<id>/flashinfer/gemm/x.py`` ->
    ``flashinfer/gemm/x.py``), a checkout's file from its ``sglang``/``flashinfer`` package
    directory; any other path as it is."""
    from pathlib import Path

    from sglang_audit.cachedir import cache_root

    path = Path(path)
    try:
        inside = path.relative_to(cache_root() / "sources").parts[1:]  # without the <id> dir
    except ValueError:
        inside = ()
    if len(inside) > 1:
        return "/".join(inside)
    parts = path.parts
    tops = [i for i, part in enumerate(parts[:-1]) if part in _TOP_PACKAGES]
    return "/".join(parts[tops[-1]:]) if tops else str(path)


# the pipeline finds these on the progress callback (it knows nothing of terminals)
progress.on_parse_factory = parse_progress  # type: ignore[attr-defined]
progress.done = STATUS.clear  # type: ignore[attr-defined]


def _status(text: str) -> None:
    STATUS.show(text)  # looked up per call: tests may replace STATUS.show


progress.status = _status  # type: ignore[attr-defined]  # e.g. bytes downloaded, in place


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _profile_list() -> str:
    """The bundled profiles for --help; a broken installation still gets its help (the error
    itself comes, one line, when a command needs the profiles)."""
    try:
        return ", ".join(bundled_profiles())
    except AuditError as exc:
        return f"(none: {exc})"


# ---- the target: one declaration of its options, one type ---------------------------------
# Every command describing a deployment takes these, spelled and explained the same way;
# a command picks the ones it has (``diff`` has two sources of its own, ``graph`` no target).
_TARGET_OPTIONS: dict[str, Callable[[bool], Any]] = {
    "source": lambda required: click.option("--source", "-s", help="SGLang source: a checkout dir, a wheel/sdist file, sglang==X (downloaded into the cache, never installed), or omitted for the installed sglang (found, not imported)."),
    "arch": lambda required: click.option("--arch", "-a", required=required, help=f"GPU architecture: {', '.join(ARCH_CHOICES)}, or a compute capability like 12.0."),
    "cuda": lambda required: click.option("--cuda", default=None, help=f"CUDA version that torch reports (torch.version.cuda).  [default: {DEFAULT_CUDA}]"),
    "driver": lambda required: click.option("--driver", default=None, metavar="VERSION", help="NVIDIA driver version (nvidia-smi, NVML's nvmlSystemGetDriverVersion), e.g. 580.95.05. Unset: 580.95.05 is assumed, and the device line says so."),
    "cudnn": lambda required: click.option("--cudnn", default=None, metavar="VERSION", help="cuDNN version torch reports (e.g. 9.10.2). Unset: on CUDA with the pip environment profile, the nvidia-cudnn pin of the torch the release pins (see `sglang-audit env`), else unknown; it matters only where SGLang checks it."),
    "model": lambda required: click.option("--model", "-m", help=f"Model: a directory with config.json (and hf_quant_config.json); a Hugging Face id ORG/NAME (config files from the local HF cache, else the bundled profile imitating it, else downloaded alone unless HF_HUB_OFFLINE; HF_TOKEN and HF_ENDPOINT apply; never weights); or a bundled profile: {_profile_list()}."),
    "sets": lambda required: click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A server flag, by field or flag name (e.g. --set moe_runner_backend=flashinfer_cutlass), typed by the release's own parser. Repeatable."),
    "launch": lambda required: click.option("--launch", metavar="COMMAND", help='A pasted launch command, as in SGLang\'s docs and issues: "python -m sglang.launch_server --model-path M --tp 8 ...", "sglang serve ...", "docker run ... IMAGE python3 -m sglang.launch_server ...", with \\-continuations, comments and NAME=VALUE / env / export prefixes (these become --env).'),
    "config": lambda required: click.option("--config", "config", metavar="FILE", help="SGLang's own --config YAML file of server arguments (0.5.3+), merged by the release's own code; flags in --launch and --set win over it."),
    "env": lambda required: click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="An environment variable SGLang would see (default: unset, so the release's declared default applies). Repeatable."),
    "with_packages": lambda required: click.option("--with", "with_packages", multiple=True, metavar="PKG", help="Pretend an optional package is installed (e.g. triton_kernels). Repeatable."),
    "without_packages": lambda required: click.option("--without", "without_packages", multiple=True, metavar="PKG", help="Pretend a dependency is missing (e.g. flashinfer). Repeatable."),
    "env_profile": lambda required: click.option("--env-profile", "env_profile", metavar="NAME", help="The environment the deployment runs in (rules/env_profiles.toml): `pip` (a plain pip install of the release: its Requires-Dist) or `image` (SGLang's official docker image for the platform, from its Dockerfile: on ROCm aiter installed and SGLANG_USE_AITER=1). Default: image on ROCm, pip elsewhere. --with/--without/--env override single facts."),
    "flashinfer_source": lambda required: click.option("--flashinfer-source", metavar="SRC", help="FlashInfer source read for the kernel verdicts: a wheel/sdist/checkout, `installed` (found, not imported), or `none`. Default: $SGLANG_AUDIT_FLASHINFER_SOURCE, else flashinfer-python==PIN from the release's metadata, downloaded into the cache (never installed)."),
    "no_cache": lambda required: click.option("--no-cache", is_flag=True, help="Do not read or write the parsed-file cache."),
}
ALL_TARGET_OPTIONS = tuple(_TARGET_OPTIONS)
# what a deployment file (``--deployment``, diff's format) describes: given with the file, refused
DEPLOYMENT_OPTIONS = ("arch", "model", "sets", "launch", "config", "env", "cuda", "driver")
_SPELLING = {"sets": "set", "with_packages": "with", "without_packages": "without", "no_cache": "no-cache", "env_profile": "env-profile",
             "flashinfer_source": "flashinfer-source"}


def target_options(fn: Any = None, *, only: tuple[str, ...] = ALL_TARGET_OPTIONS, arch_required: bool = True) -> Any:
    """Declare the target options on a command (``@target_options`` or
    ``@target_options(only=(...), arch_required=False)``); the command reads them back with
    ``TargetOptions.of(kw)``."""
    def decorate(f: Any) -> Any:
        for name in reversed([n for n in ALL_TARGET_OPTIONS if n in only]):
            f = _TARGET_OPTIONS[name](arch_required)(f)
        return f

    return decorate(fn) if fn is not None else decorate


@dataclass(frozen=True)
class TargetOptions:
    """The deployment a command was given, as parsed from the target options (an option the
    command does not declare is absent: None or empty)."""

    source: str | None = None
    arch: str | None = None
    cuda: str | None = None  # None: not given; DEFAULT_CUDA applies
    cudnn: str | None = None
    driver: str | None = None
    model: str | None = None
    sets: tuple[str, ...] = ()
    launch: str | None = None
    config: str | None = None
    env: tuple[str, ...] = ()
    with_packages: tuple[str, ...] = ()
    without_packages: tuple[str, ...] = ()
    env_profile: str | None = None
    flashinfer_source: str | None = None
    no_cache: bool = False

    @classmethod
    def of(cls, kw: dict[str, Any]) -> TargetOptions:
        """The target options among a command's keyword arguments."""
        given = {n: kw[n] for n in ALL_TARGET_OPTIONS if n in kw}
        for n in ("sets", "env", "with_packages", "without_packages"):
            if n in given:
                given[n] = tuple(given[n] or ())
        given["no_cache"] = bool(given.get("no_cache"))
        return cls(**given)

    @property
    def cuda_version(self) -> str:
        return self.cuda or DEFAULT_CUDA

    def given(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if getattr(self, n)]

    def refuse_with_deployment(self) -> None:
        """With ``--deployment FILE`` the file describes the deployment: any option that
        would describe it too is an error, never silently ignored (report and diff alike)."""
        given = self.given(DEPLOYMENT_OPTIONS)
        if given:
            opt = _SPELLING.get(given[0], given[0])
            raise click.UsageError(f"--{opt} cannot be combined with --deployment (put it in the file)")

    def require_arch(self) -> str:
        if not self.arch:
            raise click.UsageError("Missing option '--arch' (or give --deployment FILE)")
        return self.arch

    def request(self, **extra: Any) -> Request:
        return Request(
            source=self.source, arch=self.arch or "", model=self.model, cuda=self.cuda_version, cudnn=self.cudnn, driver=self.driver,
            sets=list(self.sets), launch=self.launch, env=list(self.env),
            with_packages=list(self.with_packages), without_packages=list(self.without_packages), env_profile=self.env_profile,
            use_cache=not self.no_cache, flashinfer_source=self.flashinfer_source, config=self.config, **extra,
        )


def jobs_option(fn: Any) -> Any:
    """``--jobs N``: the worker processes a command resolves its independent resolutions in
    (``resolve/workers.py``); the output is the same whatever N is."""
    from sglang_audit.resolve.workers import default_jobs

    return click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                        help=f"Worker processes for the independent resolutions (default: {default_jobs()}, the "
                             "usable CPUs up to 4). 1 runs them in this process. The output is the same.")(fn)


def jobs_of(jobs: int | None) -> int:
    from sglang_audit.resolve.workers import default_jobs

    return jobs or default_jobs()


def make_request(kw: dict[str, Any]) -> Request:
    """The request of a command declared with ``@target_options`` (plus resolve's --field/--all-fields)."""
    return TargetOptions.of(kw).request(fields=tuple(kw.get("fields") or ()), all_fields=bool(kw.get("all_fields")))


DEBUG_ENV = "SGLANG_AUDIT_DEBUG"  # =1: print the traceback of an internal error
INTERNAL_ERROR_EXIT = 2  # the issue asks for 2 (not EX_SOFTWARE 70): CI treats both as failure
_MAX_MESSAGE = 1000


def one_line(text: str) -> str:
    """A message on one line: errors quote hostile input (file names, pip output, the
    analysed code's text), which may hold newlines or terminal control characters."""
    flat = " ".join(part.strip() for part in text.splitlines() if part.strip())
    flat = "".join(c if c.isprintable() else "?" for c in flat)
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 3] + "..."


def fail(message: str, exit_code: int = 2) -> NoReturn:
    click.echo(f"sglang-audit: error: {one_line(message)}", err=True)
    sys.exit(exit_code)


def internal_error(exc: BaseException) -> NoReturn:
    """An unexpected exception inside the tool: one line (the traceback only on request)."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    detail = one_line(str(exc))
    click.echo(f"sglang-audit: internal error: {type(exc).__name__}: {detail} (please report)", err=True)
    sys.exit(INTERNAL_ERROR_EXIT)


def run_or_exit(fn: Any) -> Any:
    try:
        return fn()
    except AuditError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        click.echo("sglang-audit: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        broken_pipe()
    except Exception as exc:  # RecursionError, MemoryError, a bug: never a traceback
        internal_error(exc)


def broken_pipe() -> NoReturn:
    """stdout's reader went away (`... | head`): stop quietly, as a SIGPIPE would."""
    try:
        # so the interpreter's final flush of stdout does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # not a real file descriptor (a test runner's buffer)
    sys.exit(141)


def for_reader(text: str) -> str:
    """Text output as a person reads it: on a terminal, escaped and folded to its width
    (continuations indented, never inside a token); to a pipe or a file, each line whole, for
    grep and awk (the JSON formats are for programs)."""
    if not sys.stdout.isatty():
        return text
    import shutil

    from sglang_audit.render.text import wrap

    # escaped first: folded as shown (a control character is not a place to fold)
    return wrap(escape_unsafe(text), max(60, shutil.get_terminal_size().columns))


class OneLineError(click.ClickException):
    """A usage error (or another click error) as every error of the tool is printed: one line
    ``sglang-audit: error: ...``, a usage error with the command's ``--help`` to read, never
    click's usage block."""

    def __init__(self, exc: click.ClickException, command_path: str = "sglang-audit") -> None:
        super().__init__(exc.format_message())
        # click declares exit_code a ClassVar and sets it per class; this error keeps the one
        # of the error it reformats
        self.exit_code = exc.exit_code  # type: ignore[misc]
        ctx = getattr(exc, "ctx", None)
        usage = isinstance(exc, click.UsageError)
        self.help = "" if not usage else f"{ctx.command_path if ctx is not None else command_path} --help"

    def show(self, file: Any = None) -> None:
        text = one_line(self.format_message()).rstrip(".")
        if self.help:
            text += f" (see '{self.help}')"
        click.echo(f"sglang-audit: error: {text}", err=True)


def _one_line(exc: click.ClickException, ctx: click.Context | None = None) -> click.ClickException:
    """click's own errors as one line (but the help a bare group prints); ``ctx`` is the
    group's, for the command an error without a context of its own belongs to."""
    if isinstance(exc, (click.exceptions.NoArgsIsHelpError, OneLineError)):
        return exc
    path = ctx.command_path if ctx is not None else "sglang-audit"
    if ctx is not None and ctx.invoked_subcommand:
        path += f" {ctx.invoked_subcommand}"  # its options failed to parse
    return OneLineError(exc, path)


class AuditGroup(click.Group):
    """The command group: whatever escapes a command outside ``run_or_exit`` (writing the
    output, a renderer bug) still ends as one line and a documented exit code.

    Commands registered with ``add_lazy_command`` are imported when first looked up."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy: dict[str, Callable[[], click.Command]] = {}

    def add_lazy_command(self, name: str, loader: Callable[[], click.Command]) -> None:
        """``name`` is the command ``loader()`` imports and returns."""
        self._lazy[name] = loader

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy and cmd_name not in self.commands:
            self.add_command(self._lazy[cmd_name](), cmd_name)
        return super().get_command(ctx, cmd_name)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:  # the group's own options (`sglang-audit --bogus`)
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.ClickException as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        restore = install_safe_output()
        try:
            return super().invoke(ctx)
        except click.exceptions.ClickException as exc:
            raise _one_line(exc, ctx) from None  # a command's options, or a usage error it raises
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own exits (Exit/Abort are RuntimeErrors)
        except AuditError as exc:
            fail(str(exc), exc.exit_code)
        except BrokenPipeError:
            broken_pipe()
        except Exception as exc:
            internal_error(exc)
        finally:
            restore()


# ---- output that analysed values cannot forge ------------------------------------------
# Values printed come from the analysed tree and the user's files: a control character
# (\r, ESC sequences) or a bidi override in them could rewrite what a terminal or a code
# review shows (a forged "resolved" line). Every character of those classes written to
# stdout/stderr is escaped (\x1b, \u202e): JSON and SARIF already escape controls, and
# an escaped bidi character inside a JSON string is the same string. Characters the
# output encoding cannot take are replaced, never a crash. The one exception is the tool's
# own terminal control, written through ``write_control``/``TerminalControl`` (the status
# line's \r\x1b[K, click's progress bar), whose text is escaped by whoever puts it there
# (tests/test_pty.py checks both on a real terminal).

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_unsafe(text: str) -> str:
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


class _SafeText(io.TextIOWrapper):
    def write(self, s: str) -> int:
        self.write_control(escape_unsafe(s))
        return len(s)

    def write_control(self, s: str) -> None:
        """Written as it is: the tool's own terminal control (``write_control``), never text
        from the analysed tree or the user."""
        super().write(s.encode(self.encoding or "utf-8", "replace").decode(self.encoding or "utf-8", "replace"))


def write_control(stream: Any, control: str, text: str = "") -> None:
    """The tool's own terminal control (``\\r\\x1b[K`` of a status line) as it is, then
    ``text`` escaped (it may quote the checkout or the user: a file name, a model name).
    The escaping writer ``install_safe_output`` puts on stdout/stderr escapes everything
    else written there."""
    raw = getattr(stream, "write_control", stream.write)
    raw(control + escape_unsafe(text))
    stream.flush()


class TerminalControl:
    """A stream for a writer whose output is the tool's own terminal control, e.g. click's
    progress bar (``\\r``, the cursor hide/show codes) over labels the tool wrote: what it
    writes reaches the terminal as it is. Text from the checkout or the user must be escaped
    (``escape_unsafe``) before it is put in such a label."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        getattr(self._stream, "write_control", self._stream.write)(s)
        return len(s)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        try:
            return bool(self._stream.isatty())
        except (AttributeError, ValueError):
            return False

    def fileno(self) -> int:
        return int(self._stream.fileno())


def install_safe_output() -> Any:
    """Swap stdout/stderr for escaping writers over the same buffers; returns the undo."""
    saved = (sys.stdout, sys.stderr)
    made: list[_SafeText] = []

    def wrap(stream: Any) -> Any:
        buffer = getattr(stream, "buffer", None)
        if buffer is None or isinstance(stream, _SafeText):
            return stream
        try:
            stream.flush()
            safe = _SafeText(buffer, encoding=getattr(stream, "encoding", None) or "utf-8",
                             errors="replace", line_buffering=True)
        except (AttributeError, ValueError, OSError, LookupError):
            return stream
        made.append(safe)
        return safe

    sys.stdout, sys.stderr = wrap(saved[0]), wrap(saved[1])

    def restore() -> None:
        for safe in made:
            try:
                safe.flush()
                safe.detach()  # the buffer belongs to the original stream: never close it
            except (ValueError, OSError):
                pass
        sys.stdout, sys.stderr = saved

    return restore


