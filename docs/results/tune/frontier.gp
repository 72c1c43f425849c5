set datafile separator ','
set terminal pngcairo size 1300,500 noenhanced font ',10'
set output 'docs/results/tune/frontier.png'
set multiplot layout 1,2 title 'pig-tune: attention error vs cost (5a96525d3934d63a)'
set grid
set key top right
set logscale x
set xlabel 'cost2 (mean over layers, dense layer = 1)'
set ylabel 'attention error (relative L2, mean over layers)'
set title 'quality'
plot 'docs/results/tune/uniform.csv' every ::1 using 1:2 with points pt 7 ps 0.6 lc rgb '#999999' title 'uniform candidates', 'docs/results/tune/frontier.csv' every ::1 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' title 'uniform frontier', 'docs/results/tune/per_layer.csv' every ::1 using 1:2 with linespoints lw 2 lc rgb '#d62728' title 'per-layer points', '-' using 1:2 with points pt 9 ps 2 lc rgb '#2ca02c' title 'default (10,150)'
0.100919,0.139332
e
unset logscale x
set xlabel 'decode speed-up over the default (10,150), same run, 32768 tokens, this machine'
set title 'speed'
plot 'docs/results/tune/speed.csv' every ::1 using 3:2 with points pt 7 ps 1.2 title 'measured points'
unset multiplot
