set terminal pngcairo size 1440,420 font ',10'
set output 'docs/results/tasks-4k/downstream.png'
set multiplot layout 1,3 title 'SmolLM2-135M: dense vs MagicPIG vs TopK / Quest at MagicPIG cost2'
set grid
set key bottom right
set xlabel 'cost2: sampled fraction of indexed tokens (%)'
set xrange [0:*]
set title 'needle, prompt <= 4096 tokens'
set ylabel 'score'
set yrange [0:1.05]
plot 'docs/results/tasks-4k/plotdata/down_0_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/tasks-4k/plotdata/down_0_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/tasks-4k/plotdata/down_0_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 1.000000 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
set title 'cwe, prompt <= 4096 tokens'
set ylabel 'score'
set yrange [0:1.05]
plot 'docs/results/tasks-4k/plotdata/down_1_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/tasks-4k/plotdata/down_1_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/tasks-4k/plotdata/down_1_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 0.333333 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
set title 'fwe, prompt <= 4096 tokens'
set ylabel 'score'
set yrange [0:1.05]
plot 'docs/results/tasks-4k/plotdata/down_2_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/tasks-4k/plotdata/down_2_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/tasks-4k/plotdata/down_2_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 0.166667 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
unset multiplot
