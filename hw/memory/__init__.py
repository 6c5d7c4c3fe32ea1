"""On-chip memories of a node (paper section 5.2): Act-RAM, LPRAM/BPRAM (ParamRam), line
buffers, LGB/BGB (gradient buffer), PAB, and the FIFO every stream buffer uses."""
