#!/usr/bin/env bash
# Plots the results of tlptm-scale (its --csv file, with the -fits.csv and -curves.csv files
# it writes beside it) with gnuplot: one figure per workload, tlptm and PMDK side by side,
#   scale-<workload>.png   left:  throughput X(p) with the 95 % confidence interval of each mean
#                          right: speedup S(p) = X(p) / X(1) with its 95 % interval, the linear
#                                 bound S = p, and the fitted USL curve with its 95 % band (only
#                                 when the fit has sigma and kappa: not from one thread count)
# Thread counts above the core count (oversubscribed) are shaded.
#
# Usage: scripts/plot-scale.sh SCALE.csv OUTDIR
# Example:
#   build/release/bench/tlptm-scale --csv scale.csv && scripts/plot-scale.sh scale.csv docs/plots
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SCALE.csv OUTDIR" >&2
    exit 2
fi
csv="$1"
outdir="$2"
fits="${csv%.csv}-fits.csv"
curves="${csv%.csv}-curves.csv"
for f in "$csv" "$fits" "$curves"; do
    if [ ! -r "$f" ]; then
        echo "plot-scale.sh: cannot read $f (tlptm-scale --csv writes all three)" >&2
        exit 1
    fi
done
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot-scale.sh: gnuplot not found (Debian: gnuplot-nox)" >&2
    exit 1
fi
if gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then
    terminal='pngcairo size 1280,760 noenhanced font "sans,10"'
elif gnuplot -e 'set terminal png' >/dev/null 2>&1; then
    terminal='png size 1280,760 noenhanced'
else
    echo "plot-scale.sh: this gnuplot has neither the pngcairo nor the png terminal" >&2
    exit 1
fi
mkdir -p "$outdir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# select FILE FILTER FIELDS...: the named fields of the rows of a CSV file that FILTER (an awk
# condition over f["..."]) selects, space-separated, one row per line.
select_rows() {
    local file="$1" filter="$2"
    shift 2
    awk -F, -v fields="$*" '
        NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; n = split(fields, want, " "); next }
        {
            delete f
            for (name in idx) f[name] = $(idx[name])
            if (!('"$filter"')) next
            line = ""
            for (k = 1; k <= n; k++) line = line (k > 1 ? " " : "") f[want[k]]
            print line
        }' "$file"
}

# fit_title WORKLOAD BACKEND: the key title of a backend's curve: its coefficients, or why
# there is no curve.
fit_title() {
    awk -F, -v w="$1" -v b="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
        $(idx["workload"]) == w && $(idx["backend"]) == b {
            s = $(idx["status"])
            if (s == "fitted" || s == "indicative")
                printf "%s USL%s: σ %.3g [%.3g, %.3g], κ %.3g [%.3g, %.3g]",
                    b, (s == "indicative" ? " (few points: indicative)" : ""),
                    $(idx["sigma"]), $(idx["sigma_ci95_lo"]), $(idx["sigma_ci95_hi"]),
                    $(idx["kappa"]), $(idx["kappa_ci95_lo"]), $(idx["kappa_ci95_hi"]),
                    $(idx["r2"])
            else if (s == "contention-only")
                printf "%s: no USL curve (one thread count above 1; σ %.3f if κ = 0)",
                    b, $(idx["sigma"])
            else
                printf "%s: no USL curve (%s)", b, s
            found = 1
        }
        END { if (!found) printf "%s", b }' "$fits"
}

read -r cores max_threads < <(awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
    { c = $(idx["cores"]); t = $(idx["threads"]) + 0; if (t > m) m = t }
    END { if (m == 0) exit 1; print c, m }' "$csv") || {
    echo "plot-scale.sh: $csv holds no point" >&2
    exit 1
}

mapfile -t workloads < <(awk -F, 'NR > 1 && !seen[$1]++ { print $1 }' "$csv")
colors=("#1f77b4" "#d62728")
for wl in "${workloads[@]}"; do
    mapfile -t backends < <(awk -F, -v w="$wl" 'NR > 1 && $1 == w && !seen[$2]++ { print $2 }' "$csv")
    xplots=()
    splots=()
    i=0
    for be in "${backends[@]}"; do
        color="${colors[$((i % 2))]}"
        offset="$(awk -v i="$i" -v n="${#backends[@]}" 'BEGIN { print (i - (n - 1) / 2) * 0.08 }')"
        data="$work/$wl-$be.dat"
        select_rows "$csv" "f[\"workload\"] == \"$wl\" && f[\"backend\"] == \"$be\" && f[\"reps\"] > 0" \
            threads mean_tx_s ci95_lo_tx_s ci95_hi_tx_s speedup speedup_ci95_lo speedup_ci95_hi \
            >"$data"
        [ -s "$data" ] || continue
        xplots+=("\"$data\" using (\$1+$offset):(\$2/1e6):(\$3/1e6):(\$4/1e6) with yerrorlines lw 1.5 pt 7 lc rgb \"$color\" title \"$be\"")
        curve="$work/$wl-$be-curve.dat"
        select_rows "$curves" "f[\"workload\"] == \"$wl\" && f[\"backend\"] == \"$be\"" \
            p speedup band95_lo band95_hi >"$curve"
        title="$(fit_title "$wl" "$be")"
        if [ -s "$curve" ]; then
            splots+=("\"$curve\" using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb \"$color\" title \"$be: 95% band of the fit\"")
            splots+=("\"$curve\" using 1:2 with lines lw 2 lc rgb \"$color\" title \"$title\"")
            splots+=("\"$data\" using (\$1+$offset):5:6:7 with yerrorbars pt 7 lc rgb \"$color\" title \"$be measured\"")
        else
            splots+=("\"$data\" using (\$1+$offset):5:6:7 with yerrorlines pt 7 lc rgb \"$color\" title \"$title\"")
        fi
        i=$((i + 1))
    done
    [ "${#xplots[@]}" -gt 0 ] || continue
    description="$wl"
    png="$outdir/scale-$wl.png"
    xcmd="$(IFS=,; echo "${xplots[*]}")"
    scmd="$(IFS=,; echo "${splots[*]}")"
    gnuplot <<GNUPLOT
set terminal $terminal
set output "$png"
set multiplot layout 1,2 title "tlptm-scale: workload $description ($cores cores; shaded: more threads than cores; error bars: 95 % CI of the mean)"
set grid
set xrange [0.5:$max_threads + 0.5]
set xtics 1
if ($max_threads > 16) set xtics autofreq
set object 1 rect from first ($cores + 0.5), graph 0 to graph 1, graph 1 behind fc rgb "#eeeeee" fs solid noborder
set key below left Left reverse nobox
set xlabel "threads p"
set ylabel "throughput X(p), million tx/s"
set yrange [0:*]
set title "Throughput"
plot $xcmd
set title "Speedup S(p) = X(p) / X(1)"
set ylabel "speedup S(p)"
set yrange [0:*]
set key below left Left reverse nobox font ",9"
plot x with lines dt 2 lc rgb "#555555" title "linear bound S = p", $scmd
unset multiplot
GNUPLOT
    echo "plot-scale.sh: wrote $png"
done
