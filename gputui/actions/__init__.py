"""Actions that change the machine: migrate a container, kill a process. Plans first, then journaled execution."""
