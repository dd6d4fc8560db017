"""Development material (not shipped): ``python -m dev.demo`` (make demo), README screenshots."""
