#!/usr/bin/env bash
# LibriSpeech with WeNet models on wenet-lhotse (BPE units), in WeNet's stage style:
#   bash run.sh --stage 0 --stop_stage 7 [--datadir /path/to/LibriSpeech] [--wenet_dir ...]
# `--fake_data true` replaces WeNet's data prep by a small generated corpus (the tests).
# Stages 5-6 (WeNet's train.py, recognize.py) on CPU, a tiny model (docs/recipes.md):
#   bash run.sh --stage 5 --stop_stage 6 --wenet_dir ~/wenet --device cpu \
#     --dist_backend gloo --train_config conf/train_conformer_bpe_tiny.yaml --dir exp/tiny
# Needs, in the wenet-lhotse clone: pip install -e ".[wenet,plot,bpe]" (bpe: stage 2's
# SentencePiece units; plot: stage 3's stats --plot; wenet: stages 5-6).
set -euo pipefail
cd "$(dirname "$0")"

stage=0
stop_stage=4
datadir=/export/data/en-asr-data/OpenSLR/12/LibriSpeech
wenet_dir=""
fake_data=false
nj=8
num_gpus=1
nbpe=5000
train_set=train_960
dev_set=dev
train_config=conf/train_conformer_bpe.yaml
tiny_config=conf/train_tiny_bpe.yaml
dir=exp/conformer_bpe
max_epoch=""                             # override the yaml's max_epoch (stages 5, 7)
device=cuda                              # WeNet's --device (cpu for a CPU trial)
dist_backend=nccl                        # WeNet's --ddp.dist_backend (gloo on CPU)
num_workers=4                            # DataLoader workers per rank (stage 5)
recog_set=$dev_set                       # stage 6 decodes data/$recog_set
decode_checkpoint=""                     # stage 6; default: $dir's last epoch_N.pt
decode_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
decode_batch_size=16
. ../parse_options.sh

bpemodel=data/lang_char/${train_set}_unigram${nbpe}
dict=data/lang_char/${train_set}_unigram${nbpe}_units.txt

if [ ${stage} -le 0 ] && [ ${stop_stage} -ge 0 ]; then
  echo "stage 0: data preparation -> data/{$train_set,$dev_set}/{wav.scp,text}"
  if [ "$fake_data" = true ]; then
    wenet-lhotse corpus data/$train_set -n 60 --max-duration 4 --seed 3
    wenet-lhotse corpus data/$dev_set -n 16 --max-duration 4 --seed 4
  else
    [ -n "$wenet_dir" ] || { echo "stage 0 needs --wenet_dir (WeNet's local/ scripts)"; exit 1; }
    for part in dev-clean dev-other train-clean-100 train-clean-360 train-other-500; do
      bash $wenet_dir/examples/librispeech/s0/local/data_prep_torchaudio.sh \
        $datadir/$part data/${part//-/_}
    done
    # merge as WeNet's recipe does (tools/combine_data.sh) before stage 1
    bash $wenet_dir/tools/combine_data.sh data/$train_set \
      data/train_clean_100 data/train_clean_360 data/train_other_500
    bash $wenet_dir/tools/combine_data.sh data/$dev_set data/dev_clean data/dev_other
  fi
fi

if [ ${stage} -le 1 ] && [ ${stop_stage} -ge 1 ]; then
  echo "stage 1: WeNet raw lists"
  for x in $train_set $dev_set; do
    wenet-lhotse make-list data/$x
  done
fi

if [ ${stage} -le 2 ] && [ ${stop_stage} -ge 2 ]; then
  echo "stage 2: SentencePiece unigram model and its units table, global CMVN"
  n=$nbpe; [ "$fake_data" = true ] && n=30
  # <blank> 0, <unk> 1, <sos/eos> 2, pieces: the yaml's tokenizer_conf.special_tokens
  wenet-lhotse make-units data/$train_set/text -o $dict --bpe $n --bpe-model-prefix $bpemodel
  wenet-lhotse cmvn data/$train_set/data.list -c $train_config -o data/$train_set/global_cmvn \
    -j $nj
fi

if [ ${stage} -le 3 ] && [ ${stop_stage} -ge 3 ]; then
  echo "stage 3: validate, describe"
  wenet-lhotse validate data/$train_set/data.list
  wenet-lhotse stats data/$train_set/data.list --plot data/$train_set/stats.png
fi

if [ ${stage} -le 4 ] && [ ${stop_stage} -ge 4 ]; then
  echo "stage 4: import: train -> Shar, dev -> cuts manifest"
  wenet-lhotse import data/$train_set/data.list --shar data/$train_set/shar -j $nj
  wenet-lhotse import data/$dev_set/data.list -o data/$dev_set/cuts.jsonl.gz -j $nj
fi

if [ ${stage} -le 5 ] && [ ${stop_stage} -ge 5 ]; then
  echo "stage 5: WeNet's own train.py with wenet-lhotse's loader"
  [ -n "$wenet_dir" ] || { echo "stage 5 needs --wenet_dir"; exit 1; }
  export PYTHONPATH=$wenet_dir:${PYTHONPATH:-}
  mkdir -p $dir  # WeNet's train.py writes $dir/train.yaml before creating $dir
  extra=""; [ -z "$max_epoch" ] || extra="--override_config 'max_epoch $max_epoch'"
  [ "$device" != cuda ] || extra="$extra --pin_memory"
  eval torchrun --standalone --nnodes=1 --nproc_per_node=$num_gpus \
    -m wenet_lhotse.dropin.train --config $train_config --data_type raw \
      --train_data data/$train_set/shar --cv_data data/$dev_set/cuts.jsonl.gz \
      --model_dir $dir --tensorboard_dir $dir/tensorboard --device $device \
      --ddp.dist_backend $dist_backend --num_workers $num_workers $extra
fi

if [ ${stage} -le 6 ] && [ ${stop_stage} -ge 6 ]; then
  echo "stage 6: WeNet's own recognize.py on data/$recog_set, with wenet-lhotse's reading; WER"
  [ -n "$wenet_dir" ] || { echo "stage 6 needs --wenet_dir"; exit 1; }
  export PYTHONPATH=$wenet_dir:${PYTHONPATH:-}
  # (WeNet's final.pt links to "N.pt", a name train.py never writes: the last epoch_N.pt)
  checkpoint=${decode_checkpoint:-$(ls -v $dir/epoch_*.pt | tail -n 1)}
  gpu=0; [ "$device" = cuda ] || gpu=-1
  python -m wenet_lhotse.dropin.recognize --gpu $gpu --device $device \
    --config $dir/train.yaml --data_type raw --test_data data/$recog_set/data.list \
    --checkpoint $checkpoint --batch_size $decode_batch_size --result_dir $dir \
    --modes $decode_modes
  for mode in $decode_modes; do
    python $wenet_dir/tools/compute-wer.py --char=1 --v=1 \
      data/$recog_set/text $dir/$mode/text > $dir/$mode/wer
    echo "$mode: $(grep -m1 '^Overall' $dir/$mode/wer)"
  done
fi

if [ ${stage} -le 7 ] && [ ${stop_stage} -ge 7 ]; then
  echo "stage 7: our recipe trainer (small CTC model, BPE targets)"
  extra=""; [ -z "$max_epoch" ] || extra="--max_epoch $max_epoch"
  sed -e "s#BPE_MODEL#$bpemodel.model#" -e "s#UNITS#$dict#" $tiny_config > data/train_tiny_bpe.yaml
  torchrun --standalone --nnodes=1 --nproc_per_node=$num_gpus \
    -m wenet_lhotse.demo.train --config data/train_tiny_bpe.yaml \
      --train_data data/$train_set/shar --cv_data data/$dev_set/cuts.jsonl.gz \
      --model_dir exp/tiny_bpe --num_workers 1 $extra
fi
