"""The W4A16 GEMMs' goals as checks on a benchmark result row: issue 15 (W4A16 on WGMMA, v2) for the indexed
prefill and the grouped GEMMs, issue 16 (decode v2) for the indexed decode. No torch here: the benchmarks
judge each point with it as they run, and report.py judges committed results with the same code.

A goal relative to a peer uses the same run's peer time (row["peer_us"]["humming"]) and Chord's published
H200 numbers as issue 15 quotes them; a point without either has no speed bound, only its other checks.
"""

KIMI = "Kimi K2"  # the model the benchmarks measure by default


def row_model(row):
    """A result row's model (rows written before the benches measured other models carry none: Kimi K2)."""
    return row.get("model", KIMI)


# Chord's published H200 µs (issue 15's table), Kimi K2: (parallel, projection) -> {tokens in the step: µs}.
CHORD_INDEXED = {
    ("EP8", "gate_up"): {1024: 314, 4096: 546, 16384: 1743},
    ("EP8", "down"): {1024: 163, 4096: 293, 16384: 937},
    ("TP8", "gate_up"): {1024: 366, 4096: 568, 8192: 1015},
    ("TP8", "down"): {1024: 265, 4096: 470, 8192: 848},
}
# EP8 grouped: (mode, projection) -> {rows (contiguous) or tokens (masked) per expert: µs}.
CHORD_GROUPED = {
    ("contiguous", "gate_up"): {128: 607, 512: 2318},
    ("contiguous", "down"): {128: 310, 512: 1196},
    ("masked", "gate_up"): {8: 249},
    ("masked", "down"): {8: 133},
}


def _verdict(bound_us, checks):
    return {"bound_us": bound_us, "checks": checks, "met": all(checks.values()) if checks else None}


def indexed_goal(row):
    """Prefill: <= 0.90 x the faster of Humming (same run) and Chord; >= 65% of dense BF16 from 4096 tokens at
    EP8; never slower than torch._grouped_mm. Decode: <= 0.95 x Humming; >= 85% of streaming read at 20 tokens."""
    us, checks, bound = row["chordrt_us"], {}, None
    humming = row.get("peer_us", {}).get("humming")
    if row["phase"] == "prefill":
        # Chord published Kimi K2 only
        chord = (CHORD_INDEXED.get((row["parallel"], row["projection"]), {}).get(row["tokens"])
                 if row_model(row) == KIMI else None)
        refs = [v for v in (humming, chord) if v is not None]
        if refs:
            bound = 0.90 * min(refs)
            checks["0.90x peers"] = us <= bound
        if row["parallel"] == "EP8" and row["tokens"] >= 4096:
            checks["65% dense"] = row["fraction_of_dense_bf16"] >= 0.65
        if row.get("baseline_us") is not None:
            checks["vs torch"] = us <= row["baseline_us"]
    else:
        if humming is not None:
            bound = 0.95 * humming
            checks["0.95x Humming"] = us <= bound
        if row["tokens"] == 20:
            checks["85% read"] = row["fraction_of_stream_read"] >= 0.85
    return _verdict(bound, checks)


def grouped_goal(row):
    """Contiguous: <= Chord where published, >= 1.05 x torch._grouped_mm. Masked: >= 80% of streaming read at 8
    and 16 tokens per expert, <= Chord at 8."""
    us, checks = row["chordrt_us"], {}
    chord = (CHORD_GROUPED.get((row["mode"], row["projection"]), {}).get(row["per_expert"])
             if row["ep"] == 8 and row_model(row) == KIMI else None)  # Chord published Kimi K2 only
    if chord is not None:
        checks["vs Chord"] = us <= chord
    if row["mode"] == "contiguous":
        if row.get("baseline_us") is not None:
            checks["1.05x torch"] = row["baseline_us"] >= 1.05 * us
    elif row["per_expert"] in (8, 16):
        checks["80% read"] = row["fraction_of_stream_read"] >= 0.80
    return _verdict(chord, checks)


def describe(goal):
    """A goal verdict in a few words: 'met', 'MISS (<failed checks>)' or '-' (nothing to check)."""
    if goal["met"] is None:
        return "-"
    if goal["met"]:
        return "met"
    return "MISS (" + "; ".join(name for name, ok in goal["checks"].items() if not ok) + ")"
