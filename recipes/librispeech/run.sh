#!/usr/bin/env bash
# LibriSpeech with WeNet models on wenet-lhotse (BPE units), in WeNet's stage style:
#   bash run.sh --stage 0 --stop_stage 6 [--datadir /path/to/LibriSpeech] [--wenet_dir ...]
# `--fake_data true` replaces WeNet's data prep by a small generated corpus (the tests).
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
max_epoch=""
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
  torchrun --standalone --nnodes=1 --nproc_per_node=$num_gpus \
    -m wenet_lhotse.wenet_train --config $train_config --data_type raw \
      --train_data data/$train_set/shar --cv_data data/$dev_set/cuts.jsonl.gz \
      --model_dir $dir --num_workers 4 --pin_memory
fi

if [ ${stage} -le 6 ] && [ ${stop_stage} -ge 6 ]; then
  echo "stage 6: our recipe trainer (small CTC model, BPE targets)"
  extra=""; [ -z "$max_epoch" ] || extra="--max_epoch $max_epoch"
  sed -e "s#BPE_MODEL#$bpemodel.model#" -e "s#UNITS#$dict#" $tiny_config > data/train_tiny_bpe.yaml
  torchrun --standalone --nnodes=1 --nproc_per_node=$num_gpus \
    -m wenet_lhotse.demo.train --config data/train_tiny_bpe.yaml \
      --train_data data/$train_set/shar --cv_data data/$dev_set/cuts.jsonl.gz \
      --model_dir exp/tiny_bpe --num_workers 1 $extra
fi
