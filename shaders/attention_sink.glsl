// Attention sinks (gpt-oss): with p.sinks != 0, one logit per query head, sinkv[h] (a storage
// buffer the kernel declares), joins that head's softmax with no value, so the sum of a row
// whose running maximum is m gains exp(sinkv[h] - m) (a sink far above the scores gives an
// infinite sum and an output of 0, its limit).
float with_sink(float l, float m, uint h) { return p.sinks != 0u ? l + exp(sinkv[h] - m) : l; }
