#!/bin/bash
set -e
cat > /app/build.sh <<'SH'
#!/bin/bash
# Incremental build of DIR/src/*.c into DIR/bin/app (see the task).
set -u
dir=${1:?usage: build.sh DIR}
mkdir -p "$dir/obj" "$dir/bin"
newest_header=$(find "$dir/include" -type f -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-)
built=0
for src in "$dir"/src/*.c; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .c)
  obj="$dir/obj/$name.o"
  if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || { [ -n "$newest_header" ] && [ "$newest_header" -nt "$obj" ]; }; then
    if ! cc -I "$dir/include" -c "$src" -o "$obj" 2>/dev/null; then
      rm -f "$obj"
      echo "failed $name.c"
      exit 1
    fi
    echo "compiled $name.c"
    built=1
  fi
done
if [ "$built" = 1 ] || [ ! -e "$dir/bin/app" ]; then
  cc -o "$dir/bin/app" "$dir"/obj/*.o || exit 1
fi
SH
chmod +x /app/build.sh
/app/build.sh /app/project >/dev/null
