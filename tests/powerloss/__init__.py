"""Power-loss tests: a simulated disk (LD_PRELOAD shim, shim.c + disk.py) under the real
server; every acknowledged operation must survive losing what was never fsynced."""
