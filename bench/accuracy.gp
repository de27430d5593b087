# Output error against m, log-log, for each random feature map at d = 64 and three
# input scales (favor_accuracy --csv FILE); bars span the trials' min..max, the
# dashed line is elu+1 (no m), the black point POLY2 at its width (1 + d + d(d+1)/2,
# its cost in FAVOR+'s m), and the grey line falls as 1/sqrt(m).
#
#   gnuplot -e "csv='accuracy.csv'; png='bench/accuracy.png'" bench/accuracy.gp
if (!exists("csv")) csv = 'accuracy.csv'
if (!exists("png")) png = 'accuracy.png'
if (!exists("dim")) dim = 64

set datafile separator ","
set datafile missing NaN
set terminal pngcairo size 1500,500 enhanced font "sans,10"
set output png

# CSV columns: 1 kernel, 2 d, 3 r, 4 m, 5 width, 6 n, 7 seeds, 8 logit_std,
# 9 logit_maxabs, 10 err_out_mean, 11 err_out_min, 12 err_out_max, 13-15 attention
sel(k, r, col) = (strcol(1) eq k && column(2) == dim && abs(column(3) - r) < 1e-9) ? column(col) : NaN
set logscale xy 2
set logscale y 10
set format y "10^{%L}"
set xrange [12:3000]
set xtics (16, 32, 64, 128, 256, 512, 1024, 2048)
set grid xtics ytics mytics
set xlabel "m (HYPERBOLIC, TRIG: 2m features; POLY2: its width)"
set ylabel "|O' - O|_F / |O|_F"
set key bottom left box opaque

set multiplot layout 1,3 title sprintf("favor.h: attention output error against exact softmax, d = %d, n = 256, 5 trials", dim)
do for [r in "1 2 3"] {
    rr = real(r)
    stats csv using (sel("elu", rr, 10)) nooutput
    eluerr = STATS_max
    stats csv using (sel("positive", rr, 9)) nooutput
    lmax = STATS_max
    set title sprintf("|q'| = |k'| = %s: logits within +-%.1f", r, lmax)
    plot csv using (sel("positive", rr, 4)):(sel("positive", rr, 10)):(sel("positive", rr, 11)):(sel("positive", rr, 12)) \
             with yerrorlines lw 2 title "POSITIVE (FAVOR+)", \
         csv using (sel("hyperbolic", rr, 4)):(sel("hyperbolic", rr, 10)):(sel("hyperbolic", rr, 11)):(sel("hyperbolic", rr, 12)) \
             with yerrorlines lw 2 title "HYPERBOLIC", \
         csv using (sel("trig", rr, 4)):(sel("trig", rr, 10)):(sel("trig", rr, 11)):(sel("trig", rr, 12)) \
             with yerrorlines lw 2 title "TRIG", \
         csv using (sel("relu", rr, 4)):(sel("relu", rr, 10)):(sel("relu", rr, 11)):(sel("relu", rr, 12)) \
             with yerrorlines lw 2 title "RELU", \
         eluerr with lines dt 2 lc rgb "black" title "elu+1", \
         csv using (sel("poly2", rr, 5)):(sel("poly2", rr, 10)) \
             with points pt 7 ps 1.5 lc rgb "black" title "POLY2 (at its width)", \
         1.0 / sqrt(x) with lines lc rgb "grey" title "1/sqrt(m)"
}
unset multiplot
