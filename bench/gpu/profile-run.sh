set -o pipefail
bash bench/gpu/h100.sh golden 2>&1 | grep -c identical
C=$PWD/.carry; export VELO_LIB=$C/libVelo.so VELO_SHARED=$C/shared VELO_TEST_DATA=$C/shared/models NO_COLOR=1 VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
M=/tmp/models; B="/tmp/bun $C/velo.js bench"
[ -f $M/8b.gguf ] || /tmp/bun $C/synth.js $M/8b.gguf --shape 8b --type q4_0
show() { python3 -c "import json,sys;j=json.load(open('$OUT/p.json'));print('$1',[(r.get('test',r.get('batch')),round(r.get('avg_tps',r.get('s_tg_tps',0)),1)) for r in j['results']],{k:round(v) for k,v in (j.get('profile_ms') or {}).items()})"; }
$B $M/8b.gguf --backend vulkan -p 0 -n 128 -r 2 --json > $OUT/p.json; show tg
$B $M/8b.gguf --backend vulkan -p 0 -n 128 -r 2 --profile --json > $OUT/p.json; show tg-prof
$B $M/8b.gguf --backend vulkan -p 512 -n 0 -r 2 --json > $OUT/p.json; show pp
$B $M/8b.gguf --backend vulkan --max-batch-size 16 -p 128 -n 128 --json > $OUT/p.json; show batched
$B $M/8b.gguf --backend vulkan --max-batch-size 8 -p 16 -n 64 --profile --json > $OUT/p.json; show batched-prof
