"""Whole-program scenarios: a week of cron runs, a new user's first hour, races, full disks, crashes."""
