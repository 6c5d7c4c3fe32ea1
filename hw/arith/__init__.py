"""Arithmetic: multipliers (DSP blocks or behavioural), the stalling pipeline, stochastic
rounding and saturation, and the EB rounding point (map rounder)."""
