"""The CEL environment of DRA device selectors (common/model/devices/cel_env.py): every function it
exposes, the device variable, compile and runtime errors; semantic versions (blang/semver's rules,
with Kubernetes' normalisation) and DRA amounts. Expected values follow Kubernetes' own library tests
(k8s.io/apiserver pkg/cel/library quantity_test.go and semver_test.go) where they have one."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuq_k8s.common.model.devices.amounts import NANO, format_amount, parse_amount
from gpuq_k8s.common.model.devices.cel_env import (
    SelectorCompileError,
    VersionText,
    compile_selector,
    device_data,
)
from gpuq_k8s.common.model.devices.semver import SemverError, compare_semver, is_semver, parse_semver
from gpuq_k8s.common.model.errors import InvalidValue

DEVICE = device_data(
    "gpu.example.com",
    True,
    {
        "productName": "NVIDIA H100 80GB HBM3",
        "index": 3,
        "mig": False,
        "driverVersion": VersionText("550.54.15"),
        "numa.example.com/node": 1,
    },
    {"memory": Fraction(80 * 2**30), "cores": Fraction(3, 2)},
)


def run(expression: str) -> object:
    result = compile_selector(expression, "f", "w").evaluate(DEVICE)
    return result.error if result.error is not None else result.matches


@pytest.mark.parametrize(
    "expression",
    [
        # the device variable
        'device.driver == "gpu.example.com"',
        "device.allowMultipleAllocations",
        'device.attributes["gpu.example.com"].productName.startsWith("NVIDIA H100")',
        'device.attributes["gpu.example.com"].index == 3',
        '!device.attributes["gpu.example.com"].mig',
        'device.attributes["numa.example.com"].node == 1',
        'device.capacity["gpu.example.com"].memory == quantity("80Gi")',
        # quantity library
        'quantity("1Gi") == quantity("1024Mi")',
        'isQuantity("20M") && !isQuantity("20MB")',
        'sign(quantity("-1")) == -1 && sign(quantity("0")) == 0 && sign(quantity("5k")) == 1',
        'quantity("50k").isGreaterThan(quantity("49999")) && quantity("50k").isLessThan(quantity("50001"))',
        'quantity("200M").compareTo(quantity("0.2G")) == 0 && quantity("1").compareTo(quantity("2")) == -1',
        'quantity("50.703k").asApproximateFloat() == 50703.0',
        'quantity("50k").asInteger() == 50000',
        'quantity("50").isInteger() && !quantity("1.5").isInteger()',
        'quantity("50k").add(quantity("20")) == quantity("50.02k")',
        'quantity("50k").add(20).isLessThan(quantity("50021"))',
        'quantity("50k").sub(quantity("20")) == quantity("49.98k")',
        'quantity("50k").sub(20) == quantity("49980")',
        'quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger() == 20',
        'device.capacity["gpu.example.com"].cores.compareTo(quantity("1500m")) == 0',
        # semver library
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0"))',
        'semver("2.0.0").isGreaterThan(semver("1.9.9")) && '
        'semver("1.0.0").compareTo(semver("1.0.0+build")) == 0',
        'semver("v01.2", true) == semver("1.2.0")',
        'isSemver("1.2.3") && !isSemver("1.2") && isSemver("v1.2", true) && !isSemver("1.02.3")',
        'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
        'device.attributes["gpu.example.com"].driverVersion == semver("550.54.15")',
        # extensions: bindings, strings, optional
        #
        'cel.bind(dra, device.attributes["gpu.example.com"], dra.index > 2 && '
        'dra.productName.contains("H100"))',
        'device.attributes["gpu.example.com"].productName.lowerAscii().split(" ")[0] == "nvidia"',
        'device.attributes["gpu.example.com"].?nothing.orValue(7) == 7',
        # a literal domain the device lacks is an empty map, as in Kubernetes
        '!("x" in device.attributes["other.example.com"]) && '
        'device.capacity["other.example.com"].size() == 0',
        # the short name of a driver attribute is in the driver's domain
        'has(device.attributes["gpu.example.com"].productName)',
    ],
)
def test_every_function_holds(expression: str) -> None:
    assert run(expression) is True, run(expression)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ('device.attributes["gpu.example.com"].model == "x"', 'Key not found in map : "model"'),
        ('quantity("20MB").isInteger()', "quantities must match the regular expression"),
        ('quantity("1.5").asInteger() == 1', "cannot convert value to integer"),
        ('semver("1.2").major() == 1', "No Major.Minor.Patch elements found"),
        (
            'device.attributes["gpu.example.com"].index',
            "CEL result of type int could not be converted to bool",
        ),
    ],
)
def test_runtime_errors_are_results_not_exceptions(expression: str, error: str) -> None:
    result = compile_selector(expression, "f", "w").evaluate(DEVICE)
    assert result.matches is False
    assert result.error is not None and error in result.error


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("noSuchVar", "undeclared reference to 'noSuchVar'"),
        (
            'quantity("1") == "1"',
            "found no matching overload for '_==_' applied to '(kubernetes.Quantity, string)'",
        ),
        ('semver("1.0.0").compareTo(quantity("1")) == 0', "no matching overload for 'compareTo'"),
        ('device.driver + "x"', "must evaluate to bool or the unknown type, not string"),
        ('url("https://x")', "undeclared reference to 'url'"),
        ("device.driver ==", "compilation failed: 1:17: Syntax error: mismatched input"),
    ],
)
def test_compile_errors_name_the_object_and_field(expression: str, expected: str) -> None:
    with pytest.raises(SelectorCompileError) as info:
        compile_selector(expression, "spec.selectors[0].cel.expression", "DeviceClass/gpu")
    message = str(info.value)
    assert message.startswith(
        f"DeviceClass/gpu: spec.selectors[0].cel.expression: invalid value {expression!r}"
    )
    assert expected in message
    assert "\n" not in message


def test_each_expression_is_compiled_once() -> None:
    first = compile_selector('device.driver == "once"', "a", "x")
    assert compile_selector('device.driver == "once"', "b", "y") is first


@pytest.mark.parametrize(
    ("text", "normalize", "parsed"),
    [
        ("1.2.3", False, "1.2.3"),
        ("1.0.0-alpha.1+build.5", False, "1.0.0-alpha.1+build.5"),
        ("v1.2", True, "1.2.0"),
        ("01.002.3", True, "1.2.3"),
        ("1", True, "1.0.0"),
    ],
)
def test_semver_parses_as_blang(text: str, normalize: bool, parsed: str) -> None:
    assert str(parse_semver(text, normalize)) == parsed


@pytest.mark.parametrize(
    ("text", "normalize", "message"),
    [
        ("", False, "Version string empty"),
        ("1.2", False, "No Major.Minor.Patch elements found"),
        ("01.2.3", False, "Major number must not contain leading zeroes"),
        ("1.2.3-01", False, "Numeric PreRelease version must not contain leading zeroes"),
        ("1.2.3-", False, "Prerelease is empty"),
        ("1.2.3+", False, "Build meta data is empty"),
        ("1.2.x", False, "Invalid character(s) found in patch number"),
        ("1.2-rc", True, "short version cannot contain PreRelease/Build meta data"),
    ],
)
def test_semver_refuses_as_blang(text: str, normalize: bool, message: str) -> None:
    with pytest.raises(SemverError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_semver(text, normalize)
    assert not is_semver(text, normalize)


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("1.0.0", "2.0.0", -1),
        ("1.0.0-alpha", "1.0.0-alpha.1", -1),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),  # numeric identifiers sort before alphanumeric
        ("1.0.0-beta.2", "1.0.0-beta.11", -1),  # numerically
        ("1.0.0-rc.1", "1.0.0", -1),
        ("1.0.0+a", "1.0.0+b", 0),  # build metadata is ignored
        ("2.1.1", "2.1.0", 1),
    ],
)
def test_semver_precedence(a: str, b: str, order: int) -> None:
    assert compare_semver(parse_semver(a), parse_semver(b)) == order
    assert compare_semver(parse_semver(b), parse_semver(a)) == -order


@pytest.mark.parametrize(
    ("text", "nano", "formatted"),
    [
        ("80Gi", 80 * 2**30 * NANO, "80Gi"),
        ("4", 4 * NANO, "4"),
        ("500m", NANO // 2, "500m"),
        ("100n", 100, "100n"),
        ("1e-12", 1, "1n"),  # finer than a nano-unit rounds up
        ("1.5k", 1500 * NANO, "1500"),
        ("0", 0, "0"),
    ],
)
def test_amounts_are_exact_nano_units(text: str, nano: int, formatted: str) -> None:
    assert parse_amount(text, "f") == nano
    assert format_amount(nano) == formatted


def test_an_amount_error_names_the_field() -> None:
    with pytest.raises(InvalidValue) as info:
        parse_amount("-1", "spec.devices[0].capacity.memory.value", "ResourceSlice/s")
    assert str(info.value).startswith(
        "ResourceSlice/s: spec.devices[0].capacity.memory.value: invalid value '-1'"
    )
    with pytest.raises(InvalidValue, match="10GB"):
        parse_amount("10GB", "f")
