set datafile separator ','
set terminal pngcairo size 1000,420 noenhanced font ',10'
set output 'docs/results/speed/speed.png'
set multiplot layout 1,2 title 'SmolLM2-135M decode, bf16 KV, 2 threads (pig-bench-context)'
set logscale x 2
set grid
set key top right
set xlabel 'context (tokens)'
set ylabel 'decode tokens/s'
set title 'speed'
plot 'docs/results/speed/speed.csv' every ::1 using 1:2 with linespoints title 'dense', 'docs/results/speed/speed.csv' every ::1 using 1:3 with linespoints title 'LSH sampling (10,150)'
set ylabel 'share of a step in attention'
set title 'attention share'
set yrange [0:1]
plot 'docs/results/speed/speed.csv' every ::1 using 1:5 with linespoints title 'dense', 'docs/results/speed/speed.csv' every ::1 using 1:6 with linespoints title 'LSH sampling (10,150)'
unset multiplot
