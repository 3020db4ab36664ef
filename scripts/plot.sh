#!/usr/bin/env bash
# Plots the results of tlptm-workloads (its --csv file) with gnuplot, in the spirit of the
# TLPTM paper's figures:
#   log_bytes.png      log bytes per transaction, workload x log mode      (figures 4, 6, 7)
#   pm_bytes.png       persistent-memory bytes written per transaction, workload x log mode
#   latency.png        mean transaction latency, workload x log mode, at 500 ns emulated write
#                      latency (or the largest latency in the file)          (figures 5, 8)
#   throughput.png     transactions per second of tlptm's modes and PMDK, 0 ns, one thread
#
# Usage: scripts/plot.sh RESULTS.csv OUTDIR
# Example:
#   build/release/examples/hashtable/tlptm-workloads --csv results.csv &&
#       scripts/plot.sh results.csv docs/plots
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 RESULTS.csv OUTDIR" >&2
    exit 2
fi
csv="$1"
outdir="$2"
if [ ! -r "$csv" ]; then
    echo "plot.sh: cannot read $csv" >&2
    exit 1
fi
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot.sh: gnuplot not found (Debian: gnuplot-nox)" >&2
    exit 1
fi
if gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then
    terminal='pngcairo size 960,540 noenhanced font "sans,11"'
elif gnuplot -e 'set terminal png' >/dev/null 2>&1; then
    terminal='png size 960,540 noenhanced'
else
    echo "plot.sh: this gnuplot has neither the pngcairo nor the png terminal" >&2
    exit 1
fi
mkdir -p "$outdir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# table COLUMN FILTER OUT [WITH_PMDK]: a data file with one row per workload and one column
# per log mode (and PMDK's if asked): the value of COLUMN of the tlptm runs that FILTER (an awk
# condition over the named fields f["..."]) selects. A cell is the median of its matching runs
# (the repetitions of a --reps file); cells without a run are "?" (missing). Prints nothing and
# fails if no run matches.
table() {
    local column="$1" filter="$2" out="$3" with_pmdk="${4:-no}"
    awk -F, -v col="$column" -v pmdk="$with_pmdk" '
        function unquote(s) { gsub(/^"|"$/, "", s); return s }
        function median(w, m,    n, i, j, t, a) {
            n = count[w, m]
            for (i = 1; i <= n; i++) a[i] = vals[w, m, i]
            for (i = 2; i <= n; i++)
                for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
        {
            delete f
            for (name in idx) f[name] = unquote($(idx[name]))
            if (f["verified"] != "true" || f[col] == "") next
            if (!('"$filter"')) next
            if (f["backend"] == "pmdk") { if (pmdk != "yes") next; m = "pmdk" }
            else m = f["mode"]
            w = f["workload"]
            if (!(w in seen_w)) { seen_w[w] = 1; ws[++nw] = w }
            if (!(m in seen_m)) { seen_m[m] = 1 }
            vals[w, m, ++count[w, m]] = f[col] + 0
            cell[w, m] = 1
        }
        END {
            if (nw == 0) exit 1
            split("baseline aalo cblo tlptm pmdk", order, " ")
            printf "workload"
            for (k = 1; k <= 5; k++) if (order[k] in seen_m) printf " %s", order[k]
            printf "\n"
            for (i = 1; i <= nw; i++) {
                printf "%s", ws[i]
                for (k = 1; k <= 5; k++)
                    if (order[k] in seen_m)
                        printf " %s", ((ws[i], order[k]) in cell) ? median(ws[i], order[k]) : "?"
                printf "\n"
            }
        }' "$csv" >"$out"
}

# plot DATA PNG TITLE YLABEL: a clustered bar chart, one cluster per workload.
plot() {
    local data="$1" png="$2" title="$3" ylabel="$4"
    local ncol
    ncol="$(head -1 "$data" | wc -w)"
    gnuplot <<GNUPLOT
set terminal $terminal
set output "$png"
set title "$title"
set datafile missing "?"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key outside right top vertical
set xlabel "workload"
set ylabel "$ylabel"
set yrange [0:*]
set grid ytics
plot for [i=2:$ncol] "$data" using i:xtic(1) title columnheader(i)
GNUPLOT
    echo "plot.sh: wrote $png"
}

# The lowest latency and thread count of the file: log and byte figures do not depend on the
# emulated latency, and the paper's figures are single-threaded.
read -r min_ns max_ns min_threads < <(awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
    $(idx["backend"]) == "tlptm" {
        ns = $(idx["write_ns"]) + 0; t = $(idx["threads"]) + 0
        if (!seen || ns < lo) lo = ns
        if (!seen || ns > hi) hi = ns
        if (!seen || t < tmin) tmin = t
        seen = 1
    }
    END { if (!seen) exit 1; print lo, hi, tmin }' "$csv") || {
    echo "plot.sh: $csv holds no verified tlptm run" >&2
    exit 1
}
lat_ns=500
if ! awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
              $(idx["backend"]) == "tlptm" && $(idx["write_ns"]) == 500 { found = 1 }
              END { exit !found }' "$csv"; then
    lat_ns="$max_ns"
fi

base="f[\"backend\"] == \"tlptm\" && f[\"threads\"] == $min_threads"
threads_label="$min_threads thread$([ "$min_threads" = 1 ] || echo s)"

table log_bytes_per_tx "$base && f[\"write_ns\"] == $min_ns" "$work/log.dat"
plot "$work/log.dat" "$outdir/log_bytes.png" \
    "Log bytes per transaction ($threads_label)" "log bytes / transaction"

table pm_bytes_per_tx "$base && f[\"write_ns\"] == $min_ns" "$work/pm.dat"
plot "$work/pm.dat" "$outdir/pm_bytes.png" \
    "Persistent-memory bytes written per transaction ($threads_label)" "bytes / transaction"

table lat_mean_ns "$base && f[\"write_ns\"] == $lat_ns" "$work/lat.dat"
plot "$work/lat.dat" "$outdir/latency.png" \
    "Mean transaction latency, $lat_ns ns emulated write latency ($threads_label)" \
    "latency (ns)"

if table throughput_tx_s "(f[\"backend\"] == \"pmdk\" || ($base && f[\"threads\"] == 1)) && f[\"write_ns\"] == 0" \
    "$work/tput.dat" yes; then
    plot "$work/tput.dat" "$outdir/throughput.png" \
        "Throughput, tlptm log modes and PMDK libpmemobj (0 ns, 1 thread)" "transactions / s"
else
    echo "plot.sh: no single-threaded run at 0 ns: throughput.png skipped" >&2
fi
