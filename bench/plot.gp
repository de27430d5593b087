# Time against n for favor_bench's three methods, log-log: non-causal, d = 64, one
# thread; favor.h and each peer present in the CSV (favor_bench --csv FILE).
#
#   gnuplot -e "csv='favor_bench.csv'; png='bench/scaling.png'" bench/plot.gp
#
# or `cmake --build build --target favor_bench_plot` (CSV and PNG from the
# FAVOR_BENCH_CSV and FAVOR_BENCH_PNG cache variables).
if (!exists("csv")) csv = 'favor_bench.csv'
if (!exists("png")) png = 'scaling.png'

set datafile separator ","
set datafile missing NaN    # rows of other series drop out without breaking the lines
set terminal pngcairo size 1500,540 enhanced font "sans,10"
set output png

# CSV columns: 1 section, 2 method, 3 causal, 4 d, 5 n, 6 heads, 7 threads, 8 impl,
# 9 time_s, ... ; one row per measurement, a header row first.
sel(m, impl) = (strcol(1) eq "attention" && strcol(2) eq m && column(3) == 0 \
                && column(4) == 64 && column(7) == 1 && strcol(8) eq impl) ? column(9) : NaN

set logscale xy 2
set logscale y 10
set format y "10^{%L}"
set xrange [181:92682]
set xtics ("256" 256, "1K" 1024, "4K" 4096, "16K" 16384, "64K" 65536)
set grid xtics ytics mytics
set xlabel "n (tokens)"
set ylabel "seconds per call (all heads)"
set key top left box opaque

set style line 1 lc rgb "#d62728" lw 2.5 pt 7 ps 0.9
set style line 2 lc rgb "#1f77b4" lw 1.5 pt 5 ps 0.8
set style line 3 lc rgb "#9ecae1" lw 1.5 pt 4 ps 0.8 dt 2
set style line 4 lc rgb "#2ca02c" lw 1.5 pt 9 ps 0.9

set multiplot layout 1,3 title "favor.h against OpenBLAS (cblas\\_sgemm) and PyTorch: non-causal, d = 64, 1 thread (lower is faster)" font "sans,12"
do for [m in "softmax elu1 favor+"] {
    set title (m eq "softmax" ? "exact softmax" : m eq "elu1" ? "elu(x)+1 linear" : "FAVOR+ (m = 256)")
    plot csv using 5:(sel(m, "favor")) with linespoints ls 1 title "favor.h", \
         csv using 5:(sel(m, "openblas_haswell")) with linespoints ls 2 title "OpenBLAS (Haswell)", \
         csv using 5:(sel(m, "openblas_default")) with linespoints ls 3 title "OpenBLAS (default core)", \
         csv using 5:(sel(m, "torch")) with linespoints ls 4 title "PyTorch"
}
unset multiplot
