cd ~/greet
GREET_OUTBOX="$PWD/greetings.txt" TASKLEASE_KINDS=greet PYTHONPATH="$PWD" tasklease dev --no-demo
