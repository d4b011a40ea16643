"""Small helpers every part uses: atomic files and folders, progress bars, the machine, optional extras."""
