"""A small DDPM on MNIST that trains on a laptop CPU: UNet, diffusion math, samplers, data, configs,
checkpoints, the training loop, sampling, the evaluator and the run's plots.

Nothing outside this package (and the CLI) imports it: the library works without it.
"""
