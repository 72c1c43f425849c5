set terminal pngcairo size 1500,460 font ',11'
set output 'docs/results/attention_error.png'
set multiplot layout 1,3 title 'Relative L2 error of the attention output vs exact, real KV caches of SmolLM2-135M (mean over layers 2,5,8,12,16,20,24,28 and all 9 query heads)'
set logscale y
set grid
set key top right
set xlabel 'cost: tokens read / indexed tokens (%)'
set ylabel 'relative L2 error'
set xrange [0:*]
set title 'KV cache of 2048 tokens'
plot 'docs/results/plotdata/err_2048_TopK.dat' using 1:2 with linespoints lw 2 title 'TopK', 'docs/results/plotdata/err_2048_Quest.dat' using 1:2 with linespoints lw 2 title 'Quest', 'docs/results/plotdata/err_2048_Oracle.dat' using 1:2 with linespoints lw 2 title 'Oracle', 'docs/results/plotdata/err_2048_MagicPIG.dat' using 1:2 with linespoints lw 2 title 'MagicPIG'
set title 'KV cache of 4096 tokens'
plot 'docs/results/plotdata/err_4096_TopK.dat' using 1:2 with linespoints lw 2 title 'TopK', 'docs/results/plotdata/err_4096_Quest.dat' using 1:2 with linespoints lw 2 title 'Quest', 'docs/results/plotdata/err_4096_Oracle.dat' using 1:2 with linespoints lw 2 title 'Oracle', 'docs/results/plotdata/err_4096_MagicPIG.dat' using 1:2 with linespoints lw 2 title 'MagicPIG'
set title 'KV cache of 8192 tokens'
plot 'docs/results/plotdata/err_8192_TopK.dat' using 1:2 with linespoints lw 2 title 'TopK', 'docs/results/plotdata/err_8192_Quest.dat' using 1:2 with linespoints lw 2 title 'Quest', 'docs/results/plotdata/err_8192_Oracle.dat' using 1:2 with linespoints lw 2 title 'Oracle', 'docs/results/plotdata/err_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 title 'MagicPIG'
unset multiplot
set terminal pngcairo size 900,560 font ',11'
set output 'docs/results/attention_error_layers.png'
set title 'Per layer, KV cache of 8192 tokens (mean over 9 query heads): TopK solid, MagicPIG dashed'
set key outside right
plot 'docs/results/plotdata/err_layer2_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 1 dt 1 title 'TopK layer 2', 'docs/results/plotdata/err_layer2_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 1 dt 2 title 'MagicPIG layer 2', 'docs/results/plotdata/err_layer5_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 2 dt 1 title 'TopK layer 5', 'docs/results/plotdata/err_layer5_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 2 dt 2 title 'MagicPIG layer 5', 'docs/results/plotdata/err_layer8_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 3 dt 1 title 'TopK layer 8', 'docs/results/plotdata/err_layer8_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 3 dt 2 title 'MagicPIG layer 8', 'docs/results/plotdata/err_layer12_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 4 dt 1 title 'TopK layer 12', 'docs/results/plotdata/err_layer12_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 4 dt 2 title 'MagicPIG layer 12', 'docs/results/plotdata/err_layer16_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 5 dt 1 title 'TopK layer 16', 'docs/results/plotdata/err_layer16_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 5 dt 2 title 'MagicPIG layer 16', 'docs/results/plotdata/err_layer20_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 6 dt 1 title 'TopK layer 20', 'docs/results/plotdata/err_layer20_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 6 dt 2 title 'MagicPIG layer 20', 'docs/results/plotdata/err_layer24_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 7 dt 1 title 'TopK layer 24', 'docs/results/plotdata/err_layer24_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 7 dt 2 title 'MagicPIG layer 24', 'docs/results/plotdata/err_layer28_8192_TopK.dat' using 1:2 with linespoints lw 2 lc 8 dt 1 title 'TopK layer 28', 'docs/results/plotdata/err_layer28_8192_MagicPIG.dat' using 1:2 with linespoints lw 2 lc 8 dt 2 title 'MagicPIG layer 28'
