#!/usr/bin/python3
"""Module and library memory under the shim's quota (ctest shim.module_*).

module_probe (tests/integration/shim/module_probe.cpp) runs with the shim
preloaded on fakegpu, which charges a loaded image's bytes in 2 MiB granules;
fakegpu's ground truth is sampled while it runs and must never pass the quota.

Usage: module_cases.py <case> --module-probe ... (and shim_cases.py's options)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shim_cases as sc  # noqa: E402
from shim_cases import GI, MI, check  # noqa: E402

QUOTA = {"CUSHARE_MEMORY_LIMIT": "1Gi"}
IMAGE = 48 * MI  # a PTX text of 48 MiB: fakegpu charges exactly that


def module_probe(h, *args):
    with sc.ct.Sampler(sc.TruthNode(h)) as sampler:
        # Under ctest's 180 s (a file fill takes ~50 s under ASan, more under TSan).
        out, err = h.run([h.a.module_probe, *args], QUOTA, timeout=170)
    return out, err, sampler.peak


def make_fill_case(api):
    def case(h):
        out, err, peak = module_probe(h, "--mode", "fill", "--api", api, "--bytes", str(IMAGE))
        sc.check_peak(h, peak, f"{api} fill")
        check(out["result"] == "CUDA_ERROR_OUT_OF_MEMORY", f"{api}: result {out['result']}")
        check(out["took"] == [IMAGE] * out["loads"],
              f"{api}: each load took its image from the virtual free memory: {out['took']}")
        # Refused exactly at the quota: as many loads as fit, and less than
        # one more left.
        check(out["loads"] == out["free_before"] // IMAGE,
              f"{api}: {out['loads']} loads with {out['free_before']} bytes free")
        check(out["free_full"] == out["free_before"] - out["loads"] * IMAGE,
              f"{api}: free at the quota {out['free_full']}")
        check(out["free_after"] == out["free_before"], f"{api}: unloading returned all: {out}")
        check("out of memory quota" in err and api.split("_")[0].capitalize() in err,
              f"{api}: the refusal is logged: {err}")
    case.__doc__ = f"{api}: loads until refused exactly at the quota, ground truth within it"
    return case


def case_globals_measured(h):
    """PTX globals are not in the bound read from the image: each load is
    charged what it was measured to take, and the load that does not fit
    once measured is unloaded and refused (fakegpu holds it meanwhile, so
    the ground truth may pass the quota by that one load's globals)."""
    # 16 MiB of text and 40 MiB of globals: 12 loads leave 52 MiB, room for
    # the next one's bound but not for what it takes.
    image, glob = 16 * MI, 40 * MI
    out, err, peak = module_probe(h, "--mode", "fill", "--api", "module", "--bytes", str(image),
                                  "--global-bytes", str(glob))
    took = image + glob
    check(out["result"] == "CUDA_ERROR_OUT_OF_MEMORY", f"result {out['result']}")
    check(out["took"] == [took] * out["loads"], f"each load charged what it took: {out['took']}")
    check(out["loads"] == out["free_before"] // took,
          f"{out['loads']} loads with {out['free_before']} bytes free")
    check(out["free_after"] == out["free_before"], f"unloading returned all: {out}")
    check("more than the" in err and "it was unloaded" in err, f"the refusal is logged: {err}")
    check(peak <= GI + glob, f"ground truth {peak} beyond the quota by more than one load's globals")
    check((used := h.usage_after_exit().used()) == 0, f"ledger {used} after exit")


def case_context(h):
    """Modules die with their context (created and destroyed; primary deactivated)."""
    count = 4
    out, _, peak = module_probe(h, "--mode", "context", "--bytes", str(IMAGE),
                                "--count", str(count))
    sc.check_peak(h, peak, "modules in contexts")
    overhead = out["free0"] - out["free_created"]
    check(overhead > 0, f"a created context is charged: {out}")
    check(out["free_created"] - out["free_created_loaded"] == count * IMAGE,
          f"modules of the created context charged: {out}")
    check(out["free_destroyed"] == out["free0"], f"returned with cuCtxDestroy: {out}")
    check(out["free0"] - out["free_primary_loaded"] == count * IMAGE,
          f"modules of the primary context charged: {out}")
    check(out["free_released"] - out["free_other"] == overhead + count * IMAGE,
          f"returned when the primary context is deactivated: {out}")


def case_lazy(h):
    """A library loaded with no context current is charged its bound at once;
    its placement at the first cuLibraryGetKernel adds nothing."""
    out, _, peak = module_probe(h, "--mode", "lazy", "--bytes", str(IMAGE))
    sc.check_peak(h, peak, "lazy library")
    check(out["free_loaded"] == GI - 300 * MI - IMAGE, f"charged at the load: {out}")
    check(out["free_placed"] == out["free_loaded"], f"nothing more at placement: {out}")
    check(out["free_unloaded"] == GI - 300 * MI, f"returned at cuLibraryUnload: {out}")


CASES = {
    "module_fill": make_fill_case("module"),
    "module_file_fill": make_fill_case("module_file"),
    "library_fill": make_fill_case("library"),
    "library_file_fill": make_fill_case("library_file"),
    "module_globals_measured": case_globals_measured,
    "module_context": case_context,
    "module_lazy_library": case_lazy,
}


def options(ap):
    ap.add_argument("--module-probe", required=True)


if __name__ == "__main__":
    sys.exit(sc.main(CASES, options, "cushare-module-"))
