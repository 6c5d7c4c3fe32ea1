"""The three convolution engines of a layer slice (paper section 5.3): FP (forward
propagation), EB (error backpropagation) and PG (parameter gradients)."""
