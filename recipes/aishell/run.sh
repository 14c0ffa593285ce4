#!/usr/bin/env bash
# AISHELL-1 with WeNet models on wenet-lhotse, in WeNet's stage style:
#   bash run.sh --stage 0 --stop_stage 7 [--data /path/to/aishell] [--wenet_dir /path/to/wenet]
# Stage 0 uses WeNet's own data prep (needs --wenet_dir and the corpus in --data);
# `--fake_data true` replaces it by a small generated corpus (what the tests run).
# Stages 5-6 (WeNet's train.py, recognize.py) on CPU, a tiny model (docs/recipes.md):
#   bash run.sh --stage 5 --stop_stage 6 --wenet_dir ~/wenet --device cpu \
#     --dist_backend gloo --train_config conf/train_conformer_tiny.yaml --dir exp/tiny_conformer
# Needs, in the wenet-lhotse clone: pip install -e ".[wenet,plot]" (plot: stage 3's
# stats --plot; wenet: WeNet's dependencies for stages 5-6).
set -euo pipefail
cd "$(dirname "$0")"

stage=0
stop_stage=4
data=/export/data/asr-data/OpenSLR/33     # where data_aishell/{wav,transcript} live
wenet_dir=""                             # a WeNet checkout (stages 0 and 5)
fake_data=false                          # generate a tiny corpus instead of AISHELL
nj=8                                     # processes for importing
num_gpus=1                               # ranks for training (torchrun)
train_config=conf/train_conformer.yaml   # WeNet's yaml + lhotse_conf (stage 5)
tiny_config=conf/train_tiny.yaml         # our recipe trainer (stage 7)
dir=exp/conformer
max_epoch=""                             # override the yaml's max_epoch (stages 5, 7)
device=cuda                              # WeNet's --device (cpu for a CPU trial)
dist_backend=nccl                        # WeNet's --ddp.dist_backend (gloo on CPU)
num_workers=4                            # DataLoader workers per rank (stage 5)
decode_checkpoint=""                     # stage 6; default: $dir's last epoch_N.pt
decode_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
decode_batch_size=16
. ../parse_options.sh

sets="train dev test"

if [ ${stage} -le 0 ] && [ ${stop_stage} -ge 0 ]; then
  echo "stage 0: data preparation -> data/{train,dev,test}/{wav.scp,text}"
  if [ "$fake_data" = true ]; then
    for x in $sets; do
      n=60; [ "$x" = train ] || n=16
      wenet-lhotse corpus data/$x -n $n --max-duration 4 --seed $(( ${#x} + 1 ))
    done
  else
    [ -n "$wenet_dir" ] || { echo "stage 0 needs --wenet_dir (WeNet's local/ scripts)"; exit 1; }
    bash $wenet_dir/examples/aishell/s0/local/aishell_data_prep.sh \
      $data/data_aishell/wav $data/data_aishell/transcript
  fi
fi

if [ ${stage} -le 1 ] && [ ${stop_stage} -ge 1 ]; then
  echo "stage 1: WeNet raw lists (same lines as WeNet's tools/make_raw_list.py)"
  for x in $sets; do
    wenet-lhotse make-list data/$x
  done
fi

if [ ${stage} -le 2 ] && [ ${stop_stage} -ge 2 ]; then
  echo "stage 2: char dictionary data/dict/lang_char.txt, global CMVN data/train/global_cmvn"
  mkdir -p data/dict
  # <blank> 0, <unk> 1, <sos/eos> 2, chars: the yaml's tokenizer_conf.special_tokens
  wenet-lhotse make-units data/train/text -o data/dict/lang_char.txt
  # what WeNet's tools/compute_cmvn_stats.py writes (cmvn_conf.cmvn_file), in parallel
  wenet-lhotse cmvn data/train/data.list -c $train_config -o data/train/global_cmvn -j $nj
fi

if [ ${stage} -le 3 ] && [ ${stop_stage} -ge 3 ]; then
  echo "stage 3: validate every list, describe the training set"
  for x in $sets; do
    wenet-lhotse validate data/$x/data.list
  done
  wenet-lhotse stats data/train/data.list --plot data/train/stats.png
fi

if [ ${stage} -le 4 ] && [ ${stop_stage} -ge 4 ]; then
  echo "stage 4: import: train -> Lhotse Shar (restartable), dev/test -> cuts manifests"
  wenet-lhotse import data/train/data.list --shar data/train/shar -j $nj
  for x in dev test; do
    wenet-lhotse import data/$x/data.list -o data/$x/cuts.jsonl.gz -j $nj
  done
fi

if [ ${stage} -le 5 ] && [ ${stop_stage} -ge 5 ]; then
  echo "stage 5: WeNet's own train.py, with wenet-lhotse's init_dataset_and_dataloader"
  [ -n "$wenet_dir" ] || { echo "stage 5 needs --wenet_dir"; exit 1; }
  export PYTHONPATH=$wenet_dir:${PYTHONPATH:-}
  mkdir -p $dir  # WeNet's train.py writes $dir/train.yaml before creating $dir
  extra=""; [ -z "$max_epoch" ] || extra="--override_config 'max_epoch $max_epoch'"
  [ "$device" != cuda ] || extra="$extra --pin_memory"
  # WeNet's --data_type accepts raw|shard; a Shar dir or cuts manifest is detected
  # from the path (or list sources in dataset_conf.lhotse_conf.sources).
  eval torchrun --standalone --nnodes=1 --nproc_per_node=$num_gpus \
    -m wenet_lhotse.dropin.train \
      --config $train_config \
      --data_type raw \
      --train_data data/train/shar \
      --cv_data data/dev/cuts.jsonl.gz \
      --model_dir $dir \
      --tensorboard_dir $dir/tensorboard \
      --device $device \
      --ddp.dist_backend $dist_backend \
      --num_workers $num_workers $extra
fi

if [ ${stage} -le 6 ] && [ ${stop_stage} -ge 6 ]; then
  echo "stage 6: WeNet's own recognize.py on data/test, with wenet-lhotse's reading; WER"
  [ -n "$wenet_dir" ] || { echo "stage 6 needs --wenet_dir"; exit 1; }
  export PYTHONPATH=$wenet_dir:${PYTHONPATH:-}
  # (WeNet's final.pt links to "N.pt", a name train.py never writes: the last epoch_N.pt)
  checkpoint=${decode_checkpoint:-$(ls -v $dir/epoch_*.pt | tail -n 1)}
  gpu=0; [ "$device" = cuda ] || gpu=-1
  python -m wenet_lhotse.dropin.recognize \
    --gpu $gpu --device $device \
    --config $dir/train.yaml \
    --data_type raw \
    --test_data data/test/data.list \
    --checkpoint $checkpoint \
    --batch_size $decode_batch_size \
    --result_dir $dir \
    --modes $decode_modes
  for mode in $decode_modes; do
    python $wenet_dir/tools/compute-wer.py --char=1 --v=1 \
      data/test/text $dir/$mode/text > $dir/$mode/wer
    echo "$mode: $(grep -m1 '^Overall' $dir/$mode/wer)"
  done
fi

if [ ${stage} -le 7 ] && [ ${stop_stage} -ge 7 ]; then
  echo "stage 7: our recipe trainer (small CTC model) on the same data"
  extra=""; [ -z "$max_epoch" ] || extra="--max_epoch $max_epoch"
  torchrun --standalone --nnodes=1 --nproc_per_node=$num_gpus \
    -m wenet_lhotse.demo.train \
      --config $tiny_config \
      --train_data data/train/shar \
      --cv_data data/dev/cuts.jsonl.gz \
      --model_dir exp/tiny \
      --num_workers 1 $extra
fi
