#!/bin/sh
# Plots tlptm-shuffle's chunk-size sweep: throughput and space used against the chunk size.
#
#   tlptm-shuffle --mode sweep --csv sweep.csv
#   scripts/plot-shuffle.sh sweep.csv [output-dir]
#
# Writes <output-dir>/shuffle_throughput.png (map stage and whole shuffle, MB of shuffle data per
# CPU second of the stages' threads: the figure the shared machine's load does not change) and
# <output-dir>/shuffle_space.png (bytes of persistent memory per byte of shuffle data), one
# line per backend and emulated write latency found in the CSV. Needs gnuplot (gnuplot-nox).
set -eu

csv=${1:?usage: plot-shuffle.sh sweep.csv [output-dir]}
out=${2:-.}
command -v gnuplot > /dev/null || { echo "plot-shuffle.sh: gnuplot is not installed (Debian: gnuplot-nox)" >&2; exit 1; }
[ -r "$csv" ] || { echo "plot-shuffle.sh: cannot read $csv" >&2; exit 1; }
mkdir -p "$out"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One data file per (backend, write latency) of the sweep rows: chunk KiB, map MB per CPU s,
# whole shuffle MB per CPU s, space ratio. Columns are found by name in the header.
awk -F, -v dir="$tmp" '
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
$col["mode"] == "sweep" {
    name = $col["backend"] "-" $col["write_ns"] "ns"
    file = dir "/" name ".dat"
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    printf "%g %s %s %s\n", $col["chunk_size"] / 1024, $col["map_cpu_MBps"], $col["shuffle_cpu_MBps"], \
        $col["space_ratio"] >> file
}
END { for (i = 1; i <= n; i++) print order[i] > (dir "/series") }
' "$csv"

[ -s "$tmp/series" ] || { echo "plot-shuffle.sh: no sweep rows in $csv" >&2; exit 1; }

throughput="" space=""
for s in $(cat "$tmp/series"); do
    f="$tmp/$s.dat"
    throughput="$throughput${throughput:+, }'$f' using 1:2 with linespoints title '$s map', '$f' using 1:3 with linespoints dashtype 2 title '$s whole'"
    space="$space${space:+, }'$f' using 1:4 with linespoints title '$s'"
done

gnuplot <<EOF
set terminal pngcairo size 900,520 noenhanced
set logscale x 2
set xlabel 'chunk size (KiB, 16-byte header included)'
set grid
set key outside right

set output '$out/shuffle_throughput.png'
set ylabel 'MB of shuffle data per CPU second'
set yrange [0:*]
plot $throughput

set output '$out/shuffle_space.png'
set ylabel 'bytes of persistent memory per byte of shuffle data'
set logscale y
set yrange [0.9:*]
plot $space, 1.1 with lines dashtype 3 lc rgb 'gray' title 'goal 1.1'
EOF
echo "wrote $out/shuffle_throughput.png $out/shuffle_space.png"
