"""The small base every stage stands on: atomic writes, user folders, locks, bounded loaders, safe text,
optional extras, devices and limits."""
