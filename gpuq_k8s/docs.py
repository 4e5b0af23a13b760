"""Generate docs/configuration.md from the code, so the reference cannot drift from what gpuq accepts.

    python -m gpuq_k8s.docs            # rewrite docs/configuration.md
    python -m gpuq_k8s.docs --check    # exit 1 when the committed file is stale

Every documented plugin argument is parsed by the plugin's argument model (``Args.parse``) with its
example value (the models refuse unknown keys, so a renamed key fails the generation), every field of
the argument models must be documented, and every annotation constant of ``common.model.annotations``
must have a description. The plugins documented are exactly those of ``common.model.plugin_names``
(the names the configuration accepts and the scheduler registers), each with the model
``common.model.config.ARGUMENTS`` reads its arguments with: a plugin added, renamed or given arguments
without its documentation following fails the generation.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuq_k8s.common.model import annotations as keys
from gpuq_k8s.common.model import plugin_names
from gpuq_k8s.common.model.config import ARGUMENTS, DEFAULT_CONFIG_YAML
from gpuq_k8s.docs_plugins import PLUGINS, Plugin
from gpuq_k8s.docs_volcano import volcano_sections
from gpuq_k8s.docs_volcano_plugins import PLAIN_PLUGINS, VOLCANO_PLUGINS
from gpuq_k8s.scheduler.plugins import default_registry

TARGET = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

ANNOTATIONS: Mapping[str, tuple[str, str]] = {
    "CARD_QUOTA": ("Queue", "JSON object card type -> non-negative integer: the queue's card quota."),
    "CARD_REQUEST": ("PodGroup", "JSON object card type (or `A|B`) -> count, checked at enqueue."),
    "CARD_NAME": ("Pod", "Card type, or `A|B|C` alternatives, left = preferred."),
    "GROUP_NAME": ("Pod", "The pod's PodGroup."),
    "QUEUE_NAME": ("Pod", "The pod's Queue when it has no PodGroup."),
    "PREEMPTABLE": ("Pod", '`"false"` (annotation, else label): never a preempt or reclaim victim.'),
    "TASK_SPEC": (
        "Pod",
        "(annotation, else label) The pod's task in its PodGroup: the key of `minTaskMember`.",
    ),
    "DEFAULT_QUEUE": ("-", "The queue of a pod that names none (a value, not a key)."),
    "CROSSQUOTA_PREFIX": ("Node", "`<prefix><resource>`: absolute cross-quota override for the node."),
    "CROSSQUOTA_PERCENTAGE_PREFIX": ("Node", "`<prefix><resource>`: percentage cross-quota override."),
    "CROSSQUOTA_SCORING_STRATEGY": ("Pod", "`most-allocated` or `least-allocated` for crossquota scoring."),
    "RESOURCE_STRATEGY_SCORING_TYPE": ("Pod", "Per-pod MostAllocated/LeastAllocated override."),
    "RESOURCE_STRATEGY_WEIGHT": ("Pod", "Per-pod resource-strategy-fit weight override."),
    "TF_TFLOPS_REQUEST": ("Pod", "GPUResourceQuota request: TFLOPS."),
    "TF_VRAM_REQUEST": ("Pod", "GPUResourceQuota request: VRAM (a quantity)."),
    "TF_TFLOPS_LIMIT": ("Pod", "GPUResourceQuota limit: TFLOPS."),
    "TF_VRAM_LIMIT": ("Pod", "GPUResourceQuota limit: VRAM."),
    "TF_GPU_COUNT": ("Pod", "GPUs per worker."),
    "TF_GPU_IDS": ("Pod", "Written by the scheduler: the shared GPUs a tensor-fusion pod was given."),
}


class DocsError(RuntimeError):
    pass


def annotation_constants() -> dict[str, str]:
    """Every string constant of common.model.annotations (its keys and values)."""
    return {
        name: value
        for name, value in vars(keys).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }


def check_names() -> None:
    """The documented plugins are exactly the names the configuration accepts, each documented once,
    and each plugin documented with arguments is the one whose arguments the configuration reads with
    that model (a plugin without arguments documented as such)."""
    with_arguments = [p.name for p in (*PLUGINS, *VOLCANO_PLUGINS)]
    documented = [*with_arguments, *PLAIN_PLUGINS]
    repeated = sorted({name for name in documented if documented.count(name) > 1})
    if repeated:
        raise DocsError(f"plugins documented twice: {repeated}")
    undocumented = sorted(set(plugin_names.ALL) - set(documented))
    if undocumented:
        raise DocsError(
            "plugins without documentation in gpuq_k8s/docs_plugins.py or docs_volcano_plugins.py: "
            f"{undocumented}"
        )
    unknown = sorted(set(documented) - set(plugin_names.ALL))
    if unknown:
        raise DocsError(f"documented plugins that common.model.plugin_names does not name: {unknown}")
    registered = set(default_registry().names)
    if registered != set(plugin_names.ALL):
        drift = sorted(registered ^ set(plugin_names.ALL))
        raise DocsError(
            f"the scheduler registers other plugins than common.model.plugin_names names: {drift}"
        )
    for plugin in (*PLUGINS, *VOLCANO_PLUGINS):
        if ARGUMENTS.get(plugin.name) is not plugin.model:
            read = ARGUMENTS.get(plugin.name)
            raise DocsError(f"{plugin.name}: documented with {plugin.model.__name__}, read with {read}")
    for name in PLAIN_PLUGINS:
        if name in ARGUMENTS:
            raise DocsError(
                f"{name}: documented without arguments, but {ARGUMENTS[name].__name__} reads some"
            )


def _check(plugin: Plugin) -> None:
    documented = {f for a in plugin.arguments for f in a.fields}
    undocumented = set(plugin.model.model_fields) - documented
    if undocumented:
        raise DocsError(f"{plugin.name}: model fields without a documented argument: {sorted(undocumented)}")
    for arg in plugin.arguments:
        key = arg.key.replace("<resource>", "cpu")
        try:
            plugin.parse({**plugin.required, key: arg.example})
        except Exception as err:
            raise DocsError(
                f"{plugin.name}: documented argument {key}={arg.example!r} is refused: {err}"
            ) from err


def _cell(text: str) -> str:
    """A Markdown table cell: a literal ``|`` would split it."""
    return text.replace("|", "\\|")


def render() -> str:
    constants = annotation_constants()
    missing = sorted(set(constants) - set(ANNOTATIONS))
    if missing:
        raise DocsError(f"annotation constants without a description in gpuq/docs.py: {missing}")
    unknown = sorted(set(ANNOTATIONS) - set(constants))
    if unknown:
        raise DocsError(f"described annotation constants that no longer exist: {unknown}")
    check_names()
    out = [
        "<!-- GENERATED by `python -m gpuq_k8s.docs` from the argument models and"
        " common/model/annotations.py. Do not edit. -->",
        "# Configuration reference",
        "",
        "The scheduler and the webhook read one Volcano-format configuration (`gpuq scheduler --config "
        "CONF.yaml`, `gpuq webhook --config CONF.yaml`; the Helm value `scheduler.config`, the ConfigMap "
        "`gpuq-scheduler-config` mounted into both Deployments). The webhook applies a plugin's admission "
        "rules only when that plugin is enabled, with its arguments (design.md Semantics 10). An unknown "
        "plugin, an unknown argument or a value of the wrong type is a start-up error naming the key and "
        "the value; every problem of the file is reported at once, one line each with its path "
        "(`tiers[1].plugins[3].arguments.nodeOrderWeight: invalid value -1: expected a positive number "
        "such as 1.0`), and the command exits 2. Both read the file once, at start: a changed "
        "configuration takes effect when both "
        "restart, which the `checksum/config` annotation on both pod templates does on `helm upgrade` "
        '(docs/operations.md, "Change the configuration").',
        "",
        "## Default configuration",
        "",
        "```yaml",
        DEFAULT_CONFIG_YAML.rstrip(),
        "```",
        "",
        "## Plugin arguments",
        "",
    ]
    for plugin in (*PLUGINS, *VOLCANO_PLUGINS):
        _check(plugin)
        out += [
            f"### {plugin.name}",
            "",
            f"Spec: `{plugin.spec}`. Model: `{plugin.model.__module__}.{plugin.model.__name__}`.",
            "",
            "| argument | default | example | meaning |",
            "|---|---|---|---|",
        ]
        for arg in plugin.arguments:
            example = arg.example if isinstance(arg.example, str) else repr(arg.example)
            example = _cell(str(example))
            out.append(f"| `{arg.key}` | {arg.default} | `{example}` | {_cell(arg.meaning)} |")
        out.append("")
        if plugin.notes:
            out += [plugin.notes, ""]
    out += ["### Plugins without arguments", "", "| plugin | what it does |", "|---|---|"]
    out += [f"| `{name}` | {text} |" for name, text in PLAIN_PLUGINS.items()]
    out += volcano_sections()
    out += ["", "## Annotations and labels", "", "| key | on | meaning |", "|---|---|---|"]
    for name, value in sorted(constants.items(), key=lambda kv: kv[1]):
        on, text = ANNOTATIONS[name]
        out.append(f"| `{value}` | {on} | {_cell(text)} |")
    out += [
        "",
        "Card discovery node labels: `<prefix>/<type>.product`, `.count`, `.memory` (MiB), `.replicas` "
        "(capacity-card.md; design.md Semantics 2 and 9).",
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuq_k8s.docs", description="generate docs/configuration.md"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is stale")
    args = parser.parse_args(argv)
    try:
        text = render()
    except DocsError as err:
        print(f"gpuq.docs: {err}", file=sys.stderr)
        return 2
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if args.check:
        if current != text:
            print(f"{TARGET} is stale: run `python -m gpuq_k8s.docs`", file=sys.stderr)
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
