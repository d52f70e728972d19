"""timestep_embed: sinusoidal timestep embeddings for diffusion models."""
