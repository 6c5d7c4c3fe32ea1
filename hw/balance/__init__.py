"""Weight balancing (paper section 5.2.2): fully connected rows kept on another node's BPRAM,
streamed to their owner each sample and updated from the gradients it sends back, through
relays on the nodes in between."""
