#pragma once

#include "models/graph_spec.hpp"
#include "models/model_spec.hpp"

namespace tandem::models::zoo {

// The PipeDream paper's sequence networks as graphs of lstm, seq_attention, embedding, concat,
// add and linear nodes. Both read named inputs (models/input_layout.hpp), end in per-position
// logits [batch, steps, vocab] for a cross-entropy over i32 targets [batch, steps], and take the
// decoder's input teacher-forced (the target shifted right behind token 0; no beam search or
// greedy decoding in the graph). Throws std::invalid_argument naming the field that is out of
// range.

// GNMT (Wu et al. 2016, as MLPerf's reference): `layers` LSTM layers of width d_model, half
// encoder and half decoder (8 or 16 in the paper; any even number >= 4). Inputs: i32 `source`
// [seq_len] and `target` [seq_len] (the decoder's teacher-forced input).
//   encoder: embedding(source); a bidirectional LSTM of d_model / 2 per direction (so the width
//            stays d_model; d_model must be even); then unidirectional LSTMs, each from the third
//            on added to its input (residual).
//   decoder: embedding(target); the first decoder LSTM; seq_attention of its output over the
//            encoder's top output, giving concat(decoder state, context) [batch, seq_len,
//            2 d_model]; the second decoder LSTM reads that; every later one reads
//            concat(the previous decoder output, the attention node's output), so the attention
//            output is a skip edge into every decoder stage; residual adds from the third
//            decoder layer on; a linear head to `vocab` logits per position.
// With dropout > 0, dropout follows each embedding and precedes the head.
// Unlike the paper: Luong's "general" attention score rather than GNMT's normalised Bahdanau
// one; the context passed on is concat(first decoder state, context) rather than the context
// alone (seq_attention joins them; the second layer's input is then exactly GNMT's, the later
// layers read the first decoder state once more); the embeddings add learned positions (the
// graph's embedding always does); one vocabulary for both sides; no length masking (every
// sequence has seq_len tokens), no beam search, no length normalisation.
GraphSpec gnmt_graph(const ModelSpec& spec);

// S2VT (Venugopalan et al. 2015, "Sequence to Sequence -- Video to Text"): two stacked LSTMs
// of width d_model. Inputs: f32 `frames` [frames, frame_features] (per-frame CNN features) and
// i32 `caption` [seq_len] (the caption shifted right behind token 0, teacher forcing); they
// mix dtypes, so they travel packed as f32.
//   the first LSTM reads the frames after a linear projection to d_model;
//   the second LSTM reads one sequence of frames + seq_len steps: the first LSTM's states for
//   the frames (encoding), then the embedded caption words (decoding), so the frames' states
//   reach the words through its recurrence, as in the paper;
//   a linear head gives `vocab` logits at every step: the frame steps are trained to emit token
//   0 (the paper's <pad>, whose outputs it ignores), the word steps the caption.
// Unlike the paper, whose first LSTM runs on over <pad> inputs while the second decodes and
// whose second LSTM reads concat(first LSTM state, word) at every step, here the second LSTM
// reads the frame states and then the words alone (no <pad> halves to concatenate): the same
// two-stage sequence without the padding. Frame features are given (no CNN in the graph); no
// beam search.
GraphSpec s2vt_graph(const ModelSpec& spec);

}  // namespace tandem::models::zoo
