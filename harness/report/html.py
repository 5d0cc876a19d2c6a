"""The HIL parts of the `--hil-report` page, as pytest-html extras and summary sections.

pytest-html 4 builds the page (results table, filters, the per-test expandable row, the image
viewer); this module only fills in what it shows for a HIL test: a small step table per
scenario run (built with `html.escape`), a matplotlib plot per run (harness.report.plots),
the runtime's log lines and the QNN calls of the failing step; and, in the summary, each
device's identity, SoC config and state, the known issues met and unmatched, and a mutation
run's table (`--mutate`, `harness mutate`).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from html import escape

from pytest_html import extras

from harness.report.plots import scenario_plot
from harness.results.run import ScenarioResult, log_tail
from harness.results import run_peaks

DETAILED_RUNS = 3  # runs per test with a step table, plot and excerpts (failing ones first)
OVERVIEW_ROWS = 60  # rows of the per-test table of runs
STEP_ROWS = 80  # rows of a step table
EXCERPT_LINES = 40
MESSAGE_CHARS = 240
RESULTS = "results.json"

STYLE = """<style>
.hil table{border-collapse:collapse;margin:4px 0 10px 0;font-size:12px}
.hil th,.hil td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
.hil th{background:#f2f2f2}
.hil tr.hil-fail td{background:#fde2e2}
.hil td.num{text-align:right;font-variant-numeric:tabular-nums}
.hil pre{background:#f7f7f7;border:1px solid #ddd;padding:4px;font-size:11px;max-height:320px;overflow:auto;white-space:pre-wrap}
.hil h4{margin:10px 0 2px 0}
.hil .muted{color:#666}
.hil .cards{display:flex;flex-wrap:wrap;gap:0 24px;align-items:flex-start}
div.media{width:760px;height:340px}
.media-container{height:300px}
</style>"""  # noqa: E501 (CSS rules one a line)


def extras_for_test(test: dict, runs: list[dict], results: list[ScenarioResult],
                raised: dict | None) -> list[dict]:
    """pytest-html extras of one test: an HTML block and one PNG per detailed run."""
    if not runs and not test.get("known_issue"):
        return []
    detailed = _detailed(runs, raised)
    parts = [STYLE, '<div class="hil">', _headline(test, runs)]
    if len(runs) > 1:
        parts.append(_overview(runs, test.get("runs_omitted", 0)))
    images = []
    for k in detailed:
        run, result = runs[k], results[k]
        failing = failing_steps(run, raised)
        parts.append(f"<h4>scenario {escape(run['scenario'])} (run {run['index']}, "
                     f"{len(run['steps'])} steps, runner {escape(run['runner'] or '?')})</h4>")
        parts.append(step_table(run, failing))
        if run.get("replay"):
            parts.append(f"<p>replay: <code>{escape(run['replay'])}</code></p>")
        parts.append(_excerpts(run, result, failing))
        images.append(extras.png(scenario_plot(run, failing),
                                 name=f"{run['scenario']} (run {run['index']})"))
    if test.get("xnnpack"):
        parts.append(_xnnpack(test["xnnpack"]))
    if test.get("xnnpack_launches"):
        parts.append(_xnnpack_launches(test["xnnpack_launches"]))
    parts.append("</div>")
    return [extras.html("".join(parts))] + images


def failing_steps(run: dict, raised: dict | None = None) -> set[int]:
    steps = {f["step"] for f in run.get("failures", []) if f.get("step") is not None}
    if raised and raised.get("step") is not None and raised.get("scenario") == run["scenario"]:
        steps.add(raised["step"])
    return steps


def _detailed(runs: list[dict], raised: dict | None) -> list[int]:
    """Indices of the runs shown in detail: failing ones (and the one the test's assertion
    names) first, else the last run."""
    picked = [i for i, r in enumerate(runs) if failing_steps(r, raised)]
    if raised and raised.get("scenario"):
        named = [i for i, r in enumerate(runs) if r["scenario"] == raised["scenario"]]
        if named and named[-1] not in picked:
            picked.insert(0, named[-1])
    if not picked and runs:
        picked = [len(runs) - 1]
    return picked[:DETAILED_RUNS]


def _headline(test: dict, runs: list[dict]) -> str:
    bits = []
    if test.get("known_issue"):
        bits.append(f"known issue <b>{escape(test['known_issue'])}</b>")
    if test.get("device"):
        bits.append(f"device {escape(test['device'])}")
    metrics = test.get("metrics") or {}
    total = metrics.get("scenarios", len(runs))
    failing = metrics.get("failed_scenarios", sum(1 for r in runs if r.get("failures")))
    bits.append(f"{total} scenario run{'s' if total != 1 else ''}"
                + (f", {failing} with failures" if failing else ""))
    peak = metrics.get("peak") or {}
    if peak.get("rss_kb") is not None:
        bits.append(f"peak Rss {peak['rss_kb'] / 1024:.1f} MiB")
    if metrics.get("live_end") is not None:
        bits.append("live at the end " + _live(metrics["live_end"]))
    return "<p>" + "; ".join(bits) + "</p>"


def _overview(runs: list[dict], omitted: int = 0) -> str:
    order = sorted(range(len(runs)), key=lambda i: (not runs[i].get("failures"), i))
    shown = sorted(order[:OVERVIEW_ROWS])
    rows = []
    for i in shown:
        run = runs[i]
        first = run["failures"][0] if run.get("failures") else None
        problem = (f"{first['kind']} at step {first['step']}: {_first_line(first['message'])}"
                   if first else "")
        peaks = run_peaks(run)
        live_end = run["steps"][-1]["live"] if run["steps"] else {}
        rows.append(_row([str(run["index"]), run["scenario"], str(len(run["steps"])),
                          "yes" if run["completed"] else f"no ({run['failure_kind']})",
                          problem, _mib(peaks["rss_kb"], 1024), _live(live_end)],
                         failing=bool(first), numeric={0, 2, 5}))
    more = len(runs) - len(shown) + omitted
    note = f'<p class="muted">{more} more runs without failures not listed</p>' if more else ""
    return ("<h4>scenario runs</h4><table><tr>" + "".join(
        f"<th>{h}</th>" for h in ("run", "scenario", "steps", "completed", "first failure",
                                  "peak Rss MiB", "live at end")) +
            "</tr>" + "".join(rows) + "</table>" + note)


def step_table(run: dict, failing: set[int]) -> str:
    rows = []
    for step in run["steps"][:STEP_ROWS]:
        message = step.get("message") or ""
        for sub in step.get("substeps") or []:
            if sub.get("message"):
                message += f"\n{sub['op']}({sub.get('module') or ''}): {sub['message']}"
        memory = step.get("memory") or {}
        rows.append(_row([str(step["index"]), step["target"], step["status"],
                          _clip(message.strip()), _ms(step.get("elapsed_ms")),
                          _live(step["live"]), _mib(memory.get("rss_kb"), 1024),
                          _mib(memory.get("dmabuf_bytes"), 2**20),
                          _mib(memory.get("dsp_heap_bytes"), 2**20)],
                         failing=step["index"] in failing, numeric={0, 4, 6, 7, 8}))
    more = len(run["steps"]) - STEP_ROWS
    note = f'<p class="muted">{more} more steps: see {RESULTS}</p>' if more > 0 else ""
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in (
        "#", "op", "status", "runtime's message", "elapsed ms", "live backend/device/context",
        "Rss MiB", "dma-buf MiB", "DSP heap MiB")) + "</tr>" + "".join(rows) + "</table>" + note)


def _excerpts(run: dict, result: ScenarioResult, failing: set[int]) -> str:
    parts = []
    first = min(failing) if failing else None
    if first is not None and first < len(result.steps):
        log = result.steps[first].log.strip()
        if log:
            parts.append(f"<p>runtime log during step {first} "
                         f"({escape(run['steps'][first]['target'])}):</p>" + _pre(log))
        calls = trace_excerpt(result, first)
        parts.append(f"<p>QNN calls up to step {first}:</p>" +
                     _pre(calls or "(no QNN call traced)"))
    else:
        tail = log_tail(result.output.stderr, 20).strip()
        if tail:
            parts.append("<p>runtime log (tail):</p>" + _pre(tail))
        if result.output.trace_text:
            lines = result.output.trace_text.splitlines()
            parts.append(f"<p>QNN call trace ({len(lines)} calls, last {EXCERPT_LINES}):</p>" +
                         _pre("\n".join(lines[-EXCERPT_LINES:])))
    for name, text in result.output.logs.items():
        parts.append(f"<p>{escape(name)} (tail):</p>" + _pre(log_tail(text, 20)))
    return "".join(parts)


def trace_excerpt(result: ScenarioResult, index: int) -> str:
    """The QNN calls of the run up to and including step `index` (the last EXCERPT_LINES),
    each marked with the step it happened in; for a step that never reported, every call."""
    reported = result.steps[index].event if index < len(result.steps) else None
    end = (reported or {}).get("trace_offset")
    lines = []
    for rec in result.trace:
        if end is not None and rec.offset > end:
            break
        step = result.step_at_offset(rec.offset)
        where = f"step {step}" if step is not None else "after the last step"
        lines.append(f"[{where}] {rec.seq} {rec.kind} " +
                     " ".join(f"{k}={v}" for k, v in rec.fields.items()))
    keep = EXCERPT_LINES - 1  # with the note, what _pre shows in full
    if len(lines) > keep:
        lines = [f"... {len(lines) - keep} earlier calls ..."] + lines[-keep:]
    return "\n".join(lines)


def _xnnpack(verdicts: list[dict]) -> str:
    rows = []
    for v in verdicts:
        wrong = v.get("expected") is not None and v["expected"] != v["classification"]
        rows.append(_row([v["scenario"], v["module"], v["classification"], v.get("expected") or "",
                          _mib(v["heap_bytes"], 2**20), _mib(v["mapped_bytes"], 2**20),
                          _mib(v["weight_bytes"], 2**20), v.get("branch") or "",
                          "" if v.get("errno") is None else str(v["errno"]),
                          v.get("reason") or "", v.get("cache_path") or "(no cache)"],
                         failing=wrong, numeric={4, 5, 6}))
    return ("<h4>XNNPACK packed-weight placement</h4><table><tr>" + "".join(
        f"<th>{h}</th>" for h in ("scenario", "module", "verdict", "expected", "heap MiB",
                                  "cache-mapped MiB", "weights MiB", "branch", "errno",
                                  "reason (the runtime's log)", "cache file")) +
            "</tr>" + "".join(rows) + "</table>")


def _xnnpack_launches(stories: list[dict]) -> str:
    """One line per cache judged across launches, then its launches."""
    parts = ["<h4>XNNPACK packed cache across launches</h4>"]
    for story in stories:
        parts.append(f"<p><b>{escape(story['name'])}</b>: {escape(story['text'])}</p>")
        rows = [_row([str(i + 1), launch["placement"], launch.get("branch") or "",
                      "" if launch.get("errno") is None else str(launch["errno"]),
                      _mib(launch["heap_bytes"], 2**20), _mib(launch["mapped_bytes"], 2**20),
                      _mib(launch["repacked_bytes"], 2**20),
                      {True: "yes", False: "no"}.get(launch["file_changed"], "")],
                     failing=False, numeric={4, 5, 6})
                for i, launch in enumerate(story["launches"])]
        parts.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in (
            "launch", "placement", "branch", "errno", "heap MiB", "cache-mapped MiB",
            "re-packed MiB", "file changed")) + "</tr>" + "".join(rows) + "</table>")
    return "".join(parts)


# Summary sections -------------------------------------------------------------------------------
def devices_section(devices: list[dict]) -> str:
    parts = [STYLE, '<div class="hil"><h2>HIL devices</h2>']
    if not devices:
        parts.append("<p>No HIL test set up a device in this run.</p>")
    for d in devices:
        parts.append(f"<h3>{escape(d.get('kind', '?'))} {escape(d.get('serial', '?'))}"
                     f" ({escape(d.get('worker', ''))})</h3>")
        identity = {"SoC": d.get("soc"), "ABI": d.get("abi"), "Android": d.get("android"),
                    "runner": d.get("runner"), **{k: v for k, v in (d.get("details") or {}).items()}}
        parts.append('<div class="cards">')
        parts.append(_kv_table("identity", identity))
        parts.append(_kv_table("SoC config", d.get("soc_config") or {}))
        if d.get("simulator_config"):
            parts.append(_kv_table("simulator config", d["simulator_config"]))
        parts.append(_kv_table("QNN", d.get("qnn") or {}))
        parts.append("</div>")
        if d.get("dsp_heap"):
            parts.append(f"<p>{escape(d['dsp_heap'])}</p>")
        parts.append(state_section(d.get("state") or {}))
    parts.append("</div>")
    return "".join(parts)


def state_section(state: dict) -> str:
    start, end = state.get("start"), state.get("end")
    if not start and not end:
        return "<p class='muted'>device state not read</p>"
    shown = start or state["end"]  # one of them was read
    if not shown.get("available"):
        return f"<p>Governor, thermal zones, battery: {escape(shown.get('reason', ''))}</p>"
    out = ["<h4>state at start and end of the session</h4>"]
    rows = []
    for name in sorted(set((start or {}).get("cpufreq", {})) | set((end or {}).get("cpufreq", {}))):
        a = (start or {}).get("cpufreq", {}).get(name, {})
        b = (end or {}).get("cpufreq", {}).get(name, {})
        rows.append(_row([f"cpufreq {name} (cpus {a.get('cpus') or b.get('cpus') or '?'})",
                          f"{a.get('governor', '-')} @ {_khz(a.get('cur_khz'))}",
                          f"{b.get('governor', '-')} @ {_khz(b.get('cur_khz'))}"]))
    for name in sorted(set((start or {}).get("thermal", {})) | set((end or {}).get("thermal", {})),
                       key=_zone_order):
        a = (start or {}).get("thermal", {}).get(name, {})
        b = (end or {}).get("thermal", {}).get(name, {})
        rows.append(_row([f"{name} {a.get('type') or b.get('type') or ''}",
                          _degc(a.get("temp_millideg_c")), _degc(b.get("temp_millideg_c"))]))
    bat_a, bat_b = (start or {}).get("battery", {}), (end or {}).get("battery", {})
    for key in ("level", "temperature_decidegC", "status_name", "voltage_mV", "usb_powered"):
        if key in bat_a or key in bat_b:
            rows.append(_row([f"battery {key}", str(bat_a.get(key, "-")), str(bat_b.get(key, "-"))]))
    if rows:
        out.append("<table><tr><th></th><th>start</th><th>end</th></tr>" + "".join(rows) +
                   "</table>")
    missing = sorted(set((start or {}).get("missing", [])) | set((end or {}).get("missing", [])))
    if missing:
        out.append(f"<p class='muted'>not readable on this device: {escape(', '.join(missing))}</p>")
    return "".join(out)


def known_issues_section(met: dict[str, dict], unmatched: list[dict],
                         defects: dict[str, list[str]]) -> str:
    """The known issues met and those that matched nothing; `defects` is results.json's
    known_issues.defects (root -> entries), which the headline counts."""
    parts = [STYLE, '<div class="hil"><h2>Known issues</h2>']
    if met:
        rows = []
        order = {"executorch": 0, "qnn": 1, "export": 2, "design": 3, "environment": 4}
        for issue_id, info in sorted(met.items(),
                                     key=lambda kv: (order.get(kv[1].get("where", ""), 5), kv[0])):
            outcomes = ", ".join(f"{n} {o}" for o, n in sorted(info.get("outcomes", {}).items()))
            bad = any(o not in ("xfailed",) for o in info.get("outcomes", {}))
            where = info.get("where", "")
            counted = f"bug, defect {info.get('root') or issue_id}" if info.get("bug") else "not counted"
            rows.append(_row([issue_id, f"{where} ({counted})", outcomes,
                              _clip(info.get("reason", ""), 300)], failing=bad))
        bugs = sum(1 for info in met.values() if info.get("bug"))
        parts.append(f"<h4>met in this run: {len(defects)} defect(s) in the runtime under test "
                     f"(executorch, qnn), {bugs} entries; {len(met) - bugs} other(s)</h4>"
                     "<table><tr><th>id</th><th>where</th>"
                     "<th>tests</th><th>reason</th></tr>" + "".join(rows) + "</table>")
    else:
        parts.append("<p>No known issue applied to a test of this run.</p>")
    if unmatched:
        rows = [_row([i["id"], i.get("source", ""), ", ".join(i.get("tests", []))], failing=True)
                for i in unmatched]
        parts.append("<h4>matched no collected test (stale or misspelt)</h4><table><tr><th>id</th>"
                     "<th>file</th><th>test patterns</th></tr>" + "".join(rows) + "</table>")
    else:
        parts.append("<p>Every known issue for this ExecuTorch version whose suite ran matched "
                     "a collected test.</p>")
    parts.append("</div>")
    return "".join(parts)


def mutation_section(doc: dict) -> str:
    """A mutation run's table (harness.mutation: `--mutate` or `harness mutate`): per mutant its
    class, verdict, the tests that killed it or the known issues that masked it, and the defect
    it injects; a masked or surviving mutant is a row in red."""
    rows = []
    for m in doc["mutants"]:
        who = m["masked_by"] or m["killed_by"]
        shown = "; ".join(who[:3]) + (f" (+{len(who) - 3})" if len(who) > 3 else "")
        rows.append(_row([m["name"], m["class"], m["verdict"], shown or "-",
                          _clip(m["description"], 300), f"{m['seconds']:.0f}"],
                         failing=m["verdict"] in ("masked", "survived"), numeric={5}))
    return (f'{STYLE}<div class="hil"><h2>Mutation score {doc["score"]:.0%} on '
            f'{escape(doc["variant"])}</h2><p>{doc["killed"]} killed, {doc["masked"]} masked, '
            f'{doc["survived"]} survived, {doc["not_reached"]} not reached, '
            f'{doc["equivalent"]} equivalent, of {len(doc["mutants"])} mutants in '
            f'{doc["seconds"]:.0f} s; tests: {escape(" ".join(doc["args"])[:500])}</p>'
            "<table><tr><th>mutant</th><th>class</th><th>verdict</th><th>killed by / masked by"
            "</th><th>defect injected</th><th>s</th></tr>" + "".join(rows) + "</table></div>")


def headline_section(devices: list[dict], environment: dict, results_name: str) -> str:
    what = ", ".join(f"{d.get('kind')} {d.get('serial')} ({d.get('soc')}, runner {d.get('runner')})"
                     for d in devices) or "no device"
    runtime = environment.get("runtime") or {}
    named = runtime.get("description") or f"executorch {environment.get('executorch')}"
    qnn = environment.get("qnn") or {}
    qairt = f", QAIRT {qnn['qairt']}" if qnn.get("qairt") else ""
    return (f"<p>HIL: {escape(what)}; runtime {escape(str(named))}; "
            f"QNN {escape(str(qnn.get('libraries', '?')) + qairt)}. "
            f"Every scenario run is in <code>{escape(results_name)}</code> beside this page.</p>")


# Helpers ----------------------------------------------------------------------------------------
def _kv_table(title: str, values: dict) -> str:
    rows = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
                   for k, v in values.items() if v not in (None, ""))
    return f"<div><h4>{escape(title)}</h4><table>{rows}</table></div>"


def _row(cells: list[str], failing: bool = False,
         numeric: AbstractSet[int] = frozenset()) -> str:
    tds = "".join(f'<td class="num">{escape(c)}</td>' if i in numeric else f"<td>{escape(c)}</td>"
                  for i, c in enumerate(cells))
    return f'<tr class="hil-fail">{tds}</tr>' if failing else f"<tr>{tds}</tr>"


def _pre(text: str) -> str:
    lines = text.splitlines()
    if len(lines) > EXCERPT_LINES:
        lines = lines[:EXCERPT_LINES] + [f"... {len(lines) - EXCERPT_LINES} more lines"]
    return f"<pre>{escape(chr(10).join(lines))}</pre>"


def _live(live: dict | None) -> str:
    if not live:
        return ""
    return f"{live.get('backend', 0)}/{live.get('device', 0)}/{live.get('context', 0)}"


def _mib(value, scale: int) -> str:
    return f"{value / scale:.1f}" if isinstance(value, (int, float)) else ""


def _ms(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else ""


def _khz(value) -> str:
    return f"{value / 1000:.0f} MHz" if isinstance(value, int) else "?"


def _degc(value) -> str:
    return f"{value / 1000:.1f} °C" if isinstance(value, int) else "-"


def _zone_order(name: str) -> tuple:
    digits = "".join(c for c in name if c.isdigit())
    return (int(digits) if digits else 0, name)


def _clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _first_line(text: str) -> str:
    return _clip(text.strip().splitlines()[0] if text.strip() else "", 160)
