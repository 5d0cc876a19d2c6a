"""QNN SDK discovery, the libQnnHtp.so interposer (ABI bridge + call tracer) and its trace."""
