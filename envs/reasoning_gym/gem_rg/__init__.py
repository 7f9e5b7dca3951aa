"""gem-reasoning-gym: one ``rg:<name>`` env per reasoning-gym dataset, scored by reasoning-gym."""

__version__ = "0.1.0"
