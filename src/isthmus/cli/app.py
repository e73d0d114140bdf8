"""The `isthmus` typer application and the one way its commands are built.

- `command(name)` registers a command. Usage errors (unknown command or option, missing or malformed
  value) and the user errors of the layers below (kubeconfig, API answers, unreachable servers,
  discovery rules) end as one `error: ...` line on stderr and exit code 2, never a traceback or
  click's usage box. The application group does the same for what it parses itself and for
  commands registered with a bare `app.command`.
- Shared option types (`KubeconfigOpt`, `ContextOpt`, `ClusterIdOpt`, `LogFormatOpt`, `LogLevelOpt`,
  `MetricsAddrOpt`, `StateDirOpt`) validate their values the same way everywhere.
- Where things are found, flag > environment > default: `--state-dir` > `$ISTHMUS_STATE_DIR` >
  `./.isthmus`; a command a user runs (`KubeconfigOpt`) reads `--kubeconfig` > `$KUBECONFIG` > the
  local clusterset's kubeconfig (in that state dir, when it has one) > `~/.kube/config` > the
  in-cluster account, and `--context` > the kubeconfig's current-context. Components run in pods
  (`ComponentKubeconfigOpt`) keep kubectl's order exactly: a state dir in their environment
  must never outrank their own ServiceAccount.
- `run_component` runs a long-running component: logging, SIGTERM/SIGINT, the optional
  `/metrics` `/healthz` `/readyz` server; the component owns start, stop and readiness.
- Help reads like kubectl's: `-h` and `--help`, flags shown with a plain placeholder (`--context
  CONTEXT`, `--timeout NUMBER`, none for a flag) instead of typer's `<str>`/`<bool>`; `isthmus
  --help` lists the commands in groups (`PANELS`, each command names its own), sorted within each,
  every one by its one-sentence summary (its docstring's first paragraph, never cut). Shell
  completion (`--install-completion`, `--show-completion`) completes commands, flags, choices, and
  as kubectl does contexts, namespaces and object names (cli/complete.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Annotated, Any, Protocol, TypeVar, runtime_checkable

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from isthmus.cli import complete

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a user-facing error and return the Exit to raise (exit code 2 = bad input)."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(code)


# --- user errors --------------------------------------------------------------------------------


def user_error_message(err: BaseException) -> str | None:
    """The one-line message of an error the user can cause and fix, or None for a bug.

    Kubeconfig and discovery errors carry their message; API answers and transport failures name
    the server; an exception without text is named by its type (timeouts in httpx have no text).
    """
    import httpx2
    from lightkube import ApiError

    from isthmus.clusterset.control import ClustersetError
    from isthmus.kube.client import KubeConfigError
    from isthmus.kube.helpers import describe_error

    if isinstance(err, KubeConfigError | ClustersetError):
        return str(err)
    if isinstance(err, ApiError):
        return _api_message(err)
    if isinstance(err, httpx2.TimeoutException):
        return f"the API server{_at(err)} did not answer in time ({describe_error(err)})"
    if isinstance(err, httpx2.HTTPError):
        return f"cannot reach the API server{_at(err)}: {describe_error(err)}"
    if isinstance(err, TimeoutError):
        return "timed out waiting for the API server"
    if isinstance(err, BrokenPipeError):
        return None  # `isthmus show ... | head`: typer ends quietly
    if isinstance(err, OSError):
        text = err.strerror or describe_error(err)
        return f"{err.filename}: {text}" if err.filename else text
    return None


def _at(err: Any) -> str:
    """` at <scheme>://<host>:<port>` of the request that failed, or nothing when unknown."""
    try:
        url = err.request.url
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when no request is attached
        return ""
    return f" at {url.scheme}://{url.host}:{url.port}" if url.port else f" at {url.scheme}://{url.host}"


def _api_message(err: Any) -> str:
    status = err.status
    code = status.code if status is not None else None
    where = _at(err)
    if code == 401:
        return f"the API server{where} rejected the credentials (401 Unauthorized): check the token"
    if code == 403:
        return f"the API server{where} refused: {status.message} (403 Forbidden)"
    reason = f"{code} {status.reason}" if status is not None and status.reason else str(code)
    return f"the API server{where} answered {reason}: {status.message if status is not None else err}"


def _usage_exit(err: UsageError, where: Any) -> typer.Exit:
    """click's usage error as one line naming the help to read (`where`: the context being parsed
    or run, for errors that carry none)."""
    message = " ".join(err.format_message().split()).rstrip(".")
    message = message[:1].lower() + message[1:]  # our messages start lower-case, click's do not
    ctx = err.ctx or where
    names: list[str] = []
    if ctx is not None and ctx.parent is None and ctx.invoked_subcommand:  # the group, running a command
        names.append(ctx.invoked_subcommand)
    while ctx is not None and ctx.parent is not None:
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    root = ctx.info_name if ctx is not None and ctx.info_name else "isthmus"  # `kubectl isthmus` as a plugin
    return fail(f"{message} (see {' '.join([root, *names])} --help)")


def _one_line(run: Callable[[], Any], ctx: Any) -> Any:
    """Run a parse or an invocation in `ctx`, turning usage and user errors into `error:` + exit 2."""
    try:
        return run()
    except NoArgsIsHelpError:
        raise  # `isthmus` alone prints the help
    except UsageError as err:
        raise _usage_exit(err, ctx) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as err:
        message = user_error_message(err)
        if message is None:
            raise
        raise fail(message) from None


# --- help without type placeholders -------------------------------------------------------------

_PLACEHOLDERS = {"int": "INTEGER", "float": "NUMBER", "path": "PATH", "file": "FILE", "dir": "DIR",
                 "bool": "true|false"}


class _Option(TyperOption):
    """An option shown as kubectl shows it: a flag alone, a value by its metavar or a plain word."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        if self.metavar is not None:
            return self.metavar
        label = (self.display_type(ctx) or "").strip("<>")
        many = label.startswith("list[")
        label = label.removeprefix("list[").removesuffix("]").removesuffix(" range")  # the range is said apart
        if label == "str":  # the flag's own last word says more than "TEXT": --broker-context CONTEXT
            word = max(self.opts, key=len).lstrip("-").rsplit("-", 1)[-1].upper()
        else:
            word = _PLACEHOLDERS.get(label.lower(), label)
        return f"{word}..." if many and self.nargs != 1 else word


class _Argument(TyperArgument):
    """An argument shown by its name alone, upper-case (`BROKER_INFO`), never `<str>`; in the usage
    line as kubectl writes it: `NAME` when required, `[NAME]` when not."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return f"{name}..." if self.nargs != 1 else name


def _plain_placeholders(params: list[Any]) -> None:
    """Typer builds its own parameter classes; give them ours, which only change how help reads."""
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = _Option
        elif type(param) is TyperArgument:
            param.__class__ = _Argument


def _summary(help_text: str | None) -> str:
    """A command's one-sentence summary: its docstring's first paragraph on one line (kubectl's
    Short), whole."""
    import inspect

    return " ".join(inspect.cleandoc(help_text or "").split("\n\n")[0].split())


class IsthmusCommand(TyperCommand):
    """A command whose usage and user errors are one `error:` line, exit 2."""

    def get_short_help_str(self, limit: int = 45) -> str:
        # click cuts the summary at `limit` characters ("Check every cluster of the..."), which shell
        # completion shows beside each command; the summary is one sentence, shown whole as kubectl.
        return self.short_help or _summary(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        params = list(super().get_params(ctx))  # with --help and completion's options, made on demand
        _plain_placeholders(params)
        return params

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return list(_one_line(lambda: super(IsthmusCommand, self).parse_args(ctx, args), ctx))

    def invoke(self, ctx: Any) -> Any:
        return _one_line(lambda: super(IsthmusCommand, self).invoke(ctx), ctx)


def _whole_completion_help() -> None:
    """zsh, fish and PowerShell show each candidate's summary beside it; typer renders it through an
    80-column Rich console first, which breaks it mid-sentence. Register those shells again (typer
    registered its own while building the command) with the summary on one line, as cobra does."""
    from typer._click.shell_completion import CompletionItem, add_completion_class
    from typer._completion_classes import FishComplete, PowerShellComplete, ZshComplete

    def one_line(item: CompletionItem) -> str:
        return " ".join(str(item.help or "").split())

    class Zsh(ZshComplete):
        def format_completion(self, item: CompletionItem) -> str:
            def escape(s: str) -> str:  # typer's, for zsh's _arguments spec
                return (s.replace('"', '""').replace("'", "''").replace("$", "\\$").replace("`", "\\`")
                        .replace(":", r"\\:"))

            value = f'"{escape(str(item.value))}"'
            return f'{value}:"{escape(one_line(item))}"' if item.help else value

    class Fish(FishComplete):
        def format_completion(self, item: CompletionItem) -> str:
            return f"{item.value}\t{one_line(item)}" if item.help else str(item.value)

    class PowerShell(PowerShellComplete):
        def format_completion(self, item: CompletionItem) -> str:
            return f"{item.value}:::{one_line(item) or ' '}"

    add_completion_class(Zsh, ZshComplete.name)
    add_completion_class(Fish, FishComplete.name)
    add_completion_class(PowerShell, PowerShellComplete.name)


class IsthmusGroup(TyperGroup):
    """The application: unknown commands and options are one `error:` line, exit 2, as are the
    errors of every subcommand (it parses and runs them inside its own `invoke`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = list(super().get_params(ctx))  # with --help and completion's options, made on demand
        _plain_placeholders(params)
        return params

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return list(_one_line(lambda: super(IsthmusGroup, self).parse_args(ctx, args), ctx))

    def invoke(self, ctx: Any) -> Any:
        return _one_line(lambda: super(IsthmusGroup, self).invoke(ctx), ctx)

    def _main_shell_completion(self, ctx_args: Any, prog_name: str, complete_var: str | None = None) -> None:
        _whole_completion_help()
        super()._main_shell_completion(ctx_args, prog_name, complete_var)

    def list_commands(self, ctx: Any) -> list[str]:
        """Group by group (`PANELS`' order), by name within each, as `kubectl --help` lists them."""

        def order(name: str) -> tuple[int, str]:
            panel = getattr(self.commands[name], "rich_help_panel", None)
            return (PANELS.index(panel) if panel in PANELS else len(PANELS), name)

        return sorted(self.commands, key=order)


app = typer.Typer(
    name="isthmus",
    help="Multi-cluster service networking for Kubernetes.",
    cls=IsthmusGroup,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion; `_ISTHMUS_COMPLETE` drives it
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Multi-cluster service networking for Kubernetes."""
    # A callback keeps `isthmus` a group of commands even when cli/main.py registered only one.


LOCAL = "Local clusterset"
SERVICES = "Services across clusters"
MEMBERSHIP = "Install and membership"
TROUBLESHOOT = "Inspect and troubleshoot"
COMPONENTS = "Components (run in pods by the manifests of deploy/)"
PANELS = (LOCAL, SERVICES, MEMBERSHIP, TROUBLESHOOT, COMPONENTS)
"""`isthmus --help`'s groups of commands, in this order: what a newcomer runs first, then the
long-running components a user rarely types (kubectl's "Basic Commands", ..., "Other Commands")."""


def command(name: str, *, panel: str, **kwargs: Any) -> Callable[[F], F]:
    """Register an `isthmus <name>` command in the help's group `panel` (one of `PANELS`); see
    the module docstring for what it gets."""
    if panel not in PANELS:
        raise ValueError(f"command {name}: panel {panel!r} is not one of {PANELS}")

    def register(f: F) -> F:
        # The summary unwrapped: rich help keeps a docstring's line breaks in the command list.
        short = kwargs.pop("short_help", None) or _summary(f.__doc__)
        return app.command(name, cls=IsthmusCommand, rich_help_panel=panel, short_help=short, **kwargs)(f)

    return register


# --- shared options -----------------------------------------------------------------------------


def _cluster_id(value: str | None) -> str | None:
    from isthmus.clusterset.cidrs import validate_cluster_id

    if value is not None:
        problem = validate_cluster_id(value)
        if problem is not None:
            raise fail(f"--cluster-id: {problem}")
    return value


def _log_format(value: str) -> str:
    if value not in ("text", "json"):
        raise fail(f"--log-format must be text or json, not {value!r}")
    return value


def _log_level(value: str) -> str:
    if not isinstance(logging.getLevelName(value.upper()), int):
        raise fail(f"--log-level must be one of debug, info, warning, error, critical, not {value!r}")
    return value


def _metrics_addr(value: str | None) -> str | None:
    from isthmus.runtime import parse_addr

    if value:
        try:
            parse_addr(value)
        except ValueError as err:
            raise fail(f"--metrics-addr: {err}") from None
    return value


STATE_DIR_ENV = "ISTHMUS_STATE_DIR"
DEFAULT_STATE_DIR = Path(".isthmus")


def default_state_dir() -> Path:
    """The local clusterset's state dir when no --state-dir is given: $ISTHMUS_STATE_DIR, else ./.isthmus."""
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def local_kubeconfig() -> Path | None:
    """The local clusterset's kubeconfig, when $KUBECONFIG is unset and the default state dir has one."""
    if os.environ.get("KUBECONFIG"):
        return None
    path = default_state_dir() / "kubeconfig"  # local.state.Layout.kubeconfig (not imported: components are lean)
    return path if path.is_file() else None


def _kubeconfig(value: Path | None) -> Path | None:
    return value if value is not None else local_kubeconfig()


KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig of the cluster (default: $KUBECONFIG's files merged as kubectl does, else the local "
             "clusterset's in $ISTHMUS_STATE_DIR or ./.isthmus, else ~/.kube/config).",
        show_default=False,
        callback=_kubeconfig,
    ),
]
ComponentKubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig of the cluster (default: $KUBECONFIG's files merged as kubectl does, else ~/.kube/config, "
             "else the pod's ServiceAccount).",
        show_default=False,
    ),
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: the current one).",
                                                autocompletion=complete.contexts)]
StateDirOpt = Annotated[
    Path,
    typer.Option("--state-dir", envvar=STATE_DIR_ENV, show_envvar=True,
                 help="Where the local clusterset keeps its state, logs and kubeconfigs."),
]
ClusterIdOpt = Annotated[
    str, typer.Option("--cluster-id", help="This cluster's ID in the clusterset (as given to join).", callback=_cluster_id)
]
LogFormatOpt = Annotated[str, typer.Option("--log-format", metavar="text|json", help="Log format.", callback=_log_format)]
LogLevelOpt = Annotated[str, typer.Option("--log-level", help="Log level (debug, info, warning, error).", callback=_log_level)]
IdentityOpt = Annotated[
    str | None,
    typer.Option("--identity", help="Holder identity in the leader-election Lease (default: $POD_NAME, else the "
                 "host name).", show_default=False),
]
MetricsAddrOpt = Annotated[
    str | None,
    typer.Option("--metrics-addr", metavar="HOST:PORT", help="Serve /metrics, /healthz and /readyz here.",
                 callback=_metrics_addr),
]


# --- long-running components --------------------------------------------------------------------


class Component(Protocol):
    """What `run_component` runs: it owns start, stop and readiness. A leader-elected component's
    `runtime.Manager` is one (its `ready` is served on /readyz)."""

    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class Finite(Protocol):
    """A component that may end on its own; `wait()` returns (or raises) when it does."""

    async def wait(self) -> None: ...


class Background:
    """A coroutine as a Component: start() runs it as a task, stop() cancels it, then `on_stop`.

    If the coroutine ends or fails on its own, the command ends too (with its error)."""

    def __init__(
        self,
        name: str,
        run: Callable[[], Coroutine[Any, Any, Any]],
        ready: Callable[[], bool],
        on_stop: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self.name = name
        self._run = run
        self._ready = ready
        self._on_stop = on_stop
        self._task: asyncio.Task[Any] | None = None

    @property
    def ready(self) -> bool:
        return self._ready()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._on_stop is not None:
            await self._on_stop()


class Together:
    """Several parts as one component (`isthmus controller-manager`, kube-lite with its proxy):
    ready when every part is; the first part to end ends the command (with its error); stop stops
    them all."""

    def __init__(self, parts: Sequence[Component]) -> None:
        self.parts = list(parts)

    @property
    def ready(self) -> bool:
        return all(p.ready for p in self.parts)

    async def start(self) -> None:
        for part in self.parts:
            await part.start()

    async def wait(self) -> None:
        waiters = [asyncio.ensure_future(p.wait()) for p in self.parts if isinstance(p, Finite)]
        if not waiters:
            await asyncio.Event().wait()  # nothing ends on its own: until stopped
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        for waiter in done:
            waiter.result()

    async def stop(self) -> None:
        await asyncio.gather(*(p.stop() for p in self.parts))


def run_component(
    name: str,
    build: Callable[[], Awaitable[Component]],
    *,
    log_format: str = "text",
    log_level: str = "info",
    metrics_addr: str | None = None,
) -> None:
    """Set up logging, build the component, serve health and metrics if asked, run it until
    SIGTERM or SIGINT (or until it ends on its own), then stop it cleanly."""
    from isthmus.runtime import setup_logging
    from isthmus.runtime.loop import run

    setup_logging(log_format, log_level)
    profile = os.environ.get("ISTHMUS_PROFILE")
    if not profile:
        run(_serve(name, build, metrics_addr))
        return
    # A developer's switch (bench/mcs.py --profile): the whole run under cProfile, one file per process.
    import cProfile

    with cProfile.Profile() as prof:
        try:
            run(_serve(name, build, metrics_addr))
        finally:
            prof.dump_stats(f"{profile}.{name}.{os.getpid()}.prof")


async def _serve(name: str, build: Callable[[], Awaitable[Component]], metrics_addr: str | None) -> None:
    """Health first, then build: building may wait (an agent waits for its cluster to join), and a
    kubelet must see a live process meanwhile — alive, not ready — rather than kill it."""
    from isthmus.runtime import HealthServer

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    built: list[Component] = []
    health: HealthServer | None = None
    if metrics_addr:
        health = HealthServer()
        health.add_liveness_check(name, lambda: True)
        health.add_readiness_check(name, lambda: bool(built) and built[0].ready)
        try:
            await health.start(metrics_addr)
        except OSError as err:
            raise fail(f"cannot serve /metrics on {metrics_addr}: {err.strerror or err}") from None
    try:
        building = asyncio.ensure_future(build())
        stop_wait = asyncio.ensure_future(stopping.wait())
        await asyncio.wait([building, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        if not building.done():  # asked to stop while still building: nothing started, nothing to stop
            building.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await building
            return
        stop_wait.cancel()
        component = building.result()
        built.append(component)
        await component.start()
        try:
            waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(stopping.wait())]
            if isinstance(component, Finite):
                waiters.append(asyncio.ensure_future(component.wait()))
            done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
            for waiter in done:
                waiter.result()  # a component that failed on its own ends the command with its error
        finally:
            await component.stop()
    finally:
        if health is not None:
            await health.stop()
