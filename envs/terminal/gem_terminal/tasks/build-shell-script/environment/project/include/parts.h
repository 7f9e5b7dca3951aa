int answer(void);
