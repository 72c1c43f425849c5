set terminal pngcairo size 1440,800 font ',10'
set output 'docs/results/downstream.png'
set multiplot layout 2,3 title 'SmolLM2-135M: dense vs MagicPIG vs TopK / Quest at MagicPIG cost2'
set grid
set key bottom right
set xlabel 'cost2: sampled fraction of indexed tokens (%)'
set xrange [0:*]
set title 'perplexity, context 2048'
set ylabel 'perplexity'
set yrange [*:*]
plot 'docs/results/plotdata/down_0_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/plotdata/down_0_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/plotdata/down_0_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 9.085149 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
set title 'perplexity, context 4096'
set ylabel 'perplexity'
set yrange [*:*]
plot 'docs/results/plotdata/down_1_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/plotdata/down_1_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/plotdata/down_1_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 8.215313 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
set title 'needle, prompt <= 2048 tokens'
set ylabel 'score'
set yrange [0:1.05]
plot 'docs/results/plotdata/down_2_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/plotdata/down_2_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/plotdata/down_2_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 1.000000 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
set title 'cwe, prompt <= 2048 tokens'
set ylabel 'score'
set yrange [0:1.05]
plot 'docs/results/plotdata/down_3_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/plotdata/down_3_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/plotdata/down_3_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 0.555556 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
set title 'fwe, prompt <= 2048 tokens'
set ylabel 'score'
set yrange [0:1.05]
plot 'docs/results/plotdata/down_4_magicpig.dat' using 1:2 with linespoints lw 2 pt 7 title 'magicpig', 'docs/results/plotdata/down_4_topk.dat' using 1:2 with linespoints lw 2 pt 7 title 'topk', 'docs/results/plotdata/down_4_quest.dat' using 1:2 with linespoints lw 2 pt 7 title 'quest', 0.444444 with lines lw 2 dt 2 lc rgb 'black' title 'dense'
unset multiplot
